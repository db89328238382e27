"""Environment variables that change what PyTorch does, or how fast.

Recorded with every run when set (``environment.collect``), and the only ones ``torchmark
submit`` sends (``web/strip.py``). Torch-free, so ``submit`` starts at once.
"""

RELEVANT_ENV = (
    "OMP_NUM_THREADS",
    "MKL_NUM_THREADS",
    "OPENBLAS_NUM_THREADS",
    "KMP_AFFINITY",
    "GOMP_CPU_AFFINITY",
    "CUDA_VISIBLE_DEVICES",
    "CUDA_LAUNCH_BLOCKING",
    "CUBLAS_WORKSPACE_CONFIG",
    "PYTORCH_CUDA_ALLOC_CONF",
    "NVIDIA_TF32_OVERRIDE",
    "TORCH_CUDNN_V8_API_ENABLED",
    "ONEDNN_MAX_CPU_ISA",
    "ATEN_CPU_CAPABILITY",
    "TORCHINDUCTOR_MAX_AUTOTUNE",
    "LD_PRELOAD",
)
