"""`flbridge demo` and its models: training beside the CPU (train), FLGraph
replay (graph), DistributedDataParallel (ddp), and the reference models the
demos, benches, tests and `flbridge coverage` share (models); timing: the
demos time the CPU at one torch thread, as the simulators run one."""
