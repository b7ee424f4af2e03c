"""The training stacks people use, on fl: DeepSpeed (an accelerator and its
op builders: deepspeed, deepspeed_accelerator, deepspeed_ops,
deepspeed_builders), HF accelerate and transformers (device detection and
mixed precision: accelerate), Lightning (an Accelerator and precision
plugins: lightning) and torch's own DistributedDataParallel (the flags its
reducer cannot honour on fl: ddp).  `import flbridge` calls install(), which leaves import
hooks (hooks); none of those libraries is imported before the program
imports it."""
from .hooks import install, when_imported
