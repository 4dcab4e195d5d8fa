"""Training loops that move or store their tensors through zipccl (consumers of `codec` only)."""
