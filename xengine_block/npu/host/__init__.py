"""The NPU's host side and its emulation: the DDR layouts (:mod:`.hostio`), block pairs for
S > 256 (:mod:`.blockpairs`), the bit-exact plan emulator (:mod:`.emulate` over
:mod:`.kernel_model`), the kernel source compiled with g++ (:mod:`.hostkernel`), the native ring
loop (:mod:`.nativering`) and the simulated device (:mod:`.simdevice`)."""
