"""A seccomp filter that keeps sandbox commands from making user namespaces.

In a user namespace of its own a process is root again: it can mount, make further
namespaces and reach kernel code that is otherwise open to root only (much of the kernel's
recent privilege-escalation history). bwrap's `--disable-userns` needs `--unshare-user`,
which maps a single uid and so cannot hold our per-sandbox uids; the sysctl
`user.max_user_namespaces` is per user namespace and ours is the host's. So commands run
under this filter instead, which allows every system call but

- `unshare` and `clone` with `CLONE_NEWUSER` in their flags: `EPERM`;
- `clone3`, whose flags sit in a struct seccomp cannot read: `ENOSYS`, so the C library
  falls back to `clone` (what Docker's default profile does);
- on x86-64, the x32 system call numbers, and system calls of any other architecture
  (32-bit code): `ENOSYS`, so nothing gets around the numbers above.

bwrap applies the filter (`--seccomp FD`) to each command, the channel's command inits
install it themselves, and in gVisor each command starts through `command_start_argv`.
"""

from __future__ import annotations

import platform
import struct

CLONE_NEWUSER = 0x10000000
EPERM = 1
ENOSYS = 38

_ARCHES: dict[str, tuple[int, dict[str, int], bool]] = {
    # machine: (AUDIT_ARCH_*, syscall numbers, has the x32 ABI)
    "x86_64": (0xC000003E, {"unshare": 272, "clone": 56, "clone3": 435}, True),
    "aarch64": (0xC00000B7, {"unshare": 97, "clone": 220, "clone3": 435}, False),
}

# BPF opcodes (linux/filter.h, linux/bpf_common.h) and seccomp return values.
_LD_ABS = 0x20  # BPF_LD | BPF_W | BPF_ABS
_JEQ = 0x15  # BPF_JMP | BPF_JEQ | BPF_K
_JGE = 0x35  # BPF_JMP | BPF_JGE | BPF_K
_JSET = 0x45  # BPF_JMP | BPF_JSET | BPF_K
_RET = 0x06  # BPF_RET | BPF_K
_ALLOW = 0x7FFF0000
_ERRNO = 0x00050000
_X32_BIT = 0x40000000
# struct seccomp_data: nr at 0, arch at 4, args[0] at 16 (its low word, little-endian).
_NR, _ARCH, _ARG0 = 0, 4, 16


def supported() -> bool:
    """Whether this machine's architecture has a filter here (x86-64, aarch64)."""
    return platform.machine() in _ARCHES


def bpf_program() -> bytes:
    """The filter as the kernel takes it (an array of `struct sock_filter`), for bwrap's
    `--seccomp FD` and for `prctl(PR_SET_SECCOMP)` in the channel's command inits."""
    arch, numbers, x32 = _ARCHES[platform.machine()]
    # (code, jump-if-true label, jump-if-false label, k); labels are resolved below.
    program: list[tuple[int, str | int, str | int, int]] = [
        (_LD_ABS, 0, 0, _ARCH),
        (_JEQ, 0, "enosys", arch),
        (_LD_ABS, 0, 0, _NR),
    ]
    if x32:
        program.append((_JGE, "enosys", 0, _X32_BIT))
    program += [
        (_JEQ, "enosys", 0, numbers["clone3"]),
        (_JEQ, "flags", 0, numbers["unshare"]),
        (_JEQ, "flags", 0, numbers["clone"]),
        (_RET, 0, 0, _ALLOW),
    ]
    labels = {"flags": len(program)}
    program += [(_LD_ABS, 0, 0, _ARG0), (_JSET, "eperm", 0, CLONE_NEWUSER), (_RET, 0, 0, _ALLOW)]
    labels["eperm"] = len(program)
    program.append((_RET, 0, 0, _ERRNO | EPERM))
    labels["enosys"] = len(program)
    program.append((_RET, 0, 0, _ERRNO | ENOSYS))
    out = b""
    for index, (code, jt, jf, k) in enumerate(program):
        offsets = [labels[j] - index - 1 if isinstance(j, str) else j for j in (jt, jf)]
        out += struct.pack("=HBBI", code, offsets[0], offsets[1], k)
    return out


COMMAND_START_SOURCE = r"""
import ctypes, os, sys
uid, gid, seccomp, limits = int(sys.argv[1]), int(sys.argv[2]), sys.argv[3], sys.argv[4]
libc = ctypes.CDLL("libc.so.6", use_errno=True)
def check(result, what):
    if result != 0:
        sys.exit("composer sandbox: %s: %s" % (what, os.strerror(ctypes.get_errno())))
for item in limits.split(","):
    number, value = map(int, item.split("="))
    pair = (ctypes.c_ulong * 2)(value, value)
    check(libc.setrlimit(number, pair), "setrlimit %d" % number)
for cap in range(64):
    if libc.prctl(24, cap, 0, 0, 0) != 0:  # PR_CAPBSET_DROP; EINVAL past the last one
        break
libc.prctl(47, 4, 0, 0, 0)  # PR_CAP_AMBIENT, PR_CAP_AMBIENT_CLEAR_ALL
os.setgroups([])
os.setresgid(gid, gid, gid)
os.setresuid(uid, uid, uid)
caps = (ctypes.c_uint32 * 6)()  # two all-zero __user_cap_data_struct
check(libc.capset((ctypes.c_uint32 * 2)(0x20080522, 0), caps), "capset")
check(libc.prctl(38, 1, 0, 0, 0), "no_new_privs")
if seccomp:
    program = bytes.fromhex(seccomp)
    buffer = ctypes.create_string_buffer(program, len(program))
    fprog = (ctypes.c_ulong * 2)(len(program) // 8, ctypes.addressof(buffer))
    check(libc.prctl(22, 2, fprog, 0, 0), "seccomp")
os.execv(sys.argv[5], sys.argv[5:])
"""
"""What `prlimit` and `setpriv --reuid --regid --clear-groups --inh-caps=-all
--bounding-set=-all --no-new-privs` do, then the filter, then an exec of the rest. Few
imports on purpose (no json, re or resource): it starts every gVisor command."""

# RLIMIT_* numbers (asm-generic, the same on x86-64 and aarch64).
RLIMIT_NUMBERS = {
    "RLIMIT_CPU": 0,
    "RLIMIT_FSIZE": 1,
    "RLIMIT_AS": 9,
    "RLIMIT_NPROC": 6,
    "RLIMIT_NOFILE": 7,
}


def command_start_argv(
    python: str, uid: int, gid: int, rlimits: list[tuple[str, int]]
) -> list[str]:
    """Put in front of an absolute argv: it runs with `rlimits`, as `uid`/`gid` without
    capabilities or groups, no_new_privs, under the filter (where `supported`).

    For gVisor, where nothing else puts a filter on `runsc exec`'s processes (the OCI
    spec's is its init's only; it has no `user.max_user_namespaces`). One Python exec in
    place of `setpriv` and `prlimit`: each exec costs about 20 ms there, so a command costs
    what it did with those two.
    """
    limits = ",".join(f"{RLIMIT_NUMBERS[name]}={value}" for name, value in rlimits)
    seccomp = bpf_program().hex() if supported() else ""
    return [python, "-I", "-S", "-c", COMMAND_START_SOURCE, str(uid), str(gid), seccomp, limits]
