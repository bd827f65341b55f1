# Pinned versions of what scripts/setup.sh installs from PyPI into .venv (sourced by the scripts).
# torch: the version the GPU machines we test on carry (2.11.0+cu130); PyPI's Linux wheel of
# 2.11.0 is that CUDA 13.0 build. numpy only keeps `import torch` from warning that it is missing.
RINGTRAIN_TORCH_VERSION=2.11.0
RINGTRAIN_NUMPY_VERSION=2.4.6
