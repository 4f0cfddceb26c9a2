"""Building blocks of the decoder: norms, rotary embeddings, MLA, dense and MoE feed-forwards."""
