"""`python -m composer_rl.cli`: the `composer-rl` command, for launchers that take a module
(torchrun: `python -m torch.distributed.run --nproc-per-node 4 -m composer_rl.cli pretrain`)."""

from composer_rl.cli import main

raise SystemExit(main())
