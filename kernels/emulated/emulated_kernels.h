// The emulated GPU's kernels (runtime/emulated/emulated_gpu.h): every entry of the kernel front's
// GPU table (kernels/gpu/gpu_kernels.h) filled with the CPU kernel behind the same front, run on
// host-tagged handles of the GPU buffers inside an open window (runtime/emulated/opaque_memory.h),
// so that only the kernel itself, never the code above the front, touches shard memory.
//
// Each wrapped call: counts a launch on the device's stream, opens every tensor argument's buffer,
// calls the front with the arguments retagged as CPU devices of the same id (the front then picks
// the CPU kernel), and hands back results on the GPU device of the first tensor argument: a fresh
// opaque buffer holding the CPU result, or the same buffer retagged when the CPU kernel returned
// one of its inputs' storage. Outputs written in place (copy_box_elements, the optimizer updates,
// ...) land directly in the opaque buffer. Errors are the CPU front's, word for word.
//
// Registered from a static initializer when DTENSOR_EMULATED_GPUS is set, or by register_kernels()
// (tests that call emulated::enable()). Not linked in a --config=cuda build: the CUDA kernels own
// the table there.
//
// Thread-safety: as the CPU kernels.
#pragma once

namespace dtensor::kernels::emulated {

// Fills every entry of gpu::registered_table with the emulated kernels (replacing what was there).
void register_kernels();

}  // namespace dtensor::kernels::emulated
