"""The NPU design and its validation: the plan's vocabulary (:mod:`.dataflow`), the plan of a
geometry (:mod:`.plan`), the hardware limits (:mod:`.limits`) and the validator
(:mod:`.validate`), the mlir-aie design generated from a plan (:mod:`.mlir`), its build
(:mod:`.build`, :mod:`.aiecc`, :mod:`.artifacts`) and ``show_design``."""

from ..._moved import moved_names

#: This package's name was the module now at :mod:`.mlir`: its names are read from here, with a
#: warning, for one more release.
__getattr__ = moved_names(__name__, dict.fromkeys(
    ("INSTALL_HINT", "Call", "MlirAieUnavailable", "Recorder", "Ref", "design_calls",
     "format_calls", "load_mlir_aie", "to_mlir"), "xengine_block.npu.design.mlir"))
