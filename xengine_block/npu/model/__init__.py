"""The NPU's performance model (:mod:`.perfmodel`: a plan's predicted rates and bottleneck,
``xengine npu-model``) and its trace of one call (:mod:`.perftrace`)."""
