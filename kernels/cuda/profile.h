// The GPU profile: with DTENSOR_GPU_PROFILE=1 in the environment, every call of the kernel
// front that runs on a GPU device (the kernel list, the runtime's element loops and the host <->
// GPU copies) is timed by two CUDA events recorded on the device's stream around it, and a table
// (op, calls, total ms, share) is printed to stderr at exit, or where a program asks for it
// (print_gpu_profile). A call's time is the stream's time between its two events: the kernels it
// launched, and any gap in which the stream waited for the host while the call ran. A front
// call made inside another (conv2d's padding, dense's bias) counts in its caller only. Unset or
// "0": off, and the table is left as the kernels filled it (no cost).
//
// The switch is read once, before main, when the CUDA kernels fill the GPU table
// (registration.cc); a value other than "0" or "1" turns the wrappers on and makes the first
// profiled call throw the error of parse_gpu_profile_switch.
//
// Thread-safety: profiled calls may run on any threads; the counts are kept under one mutex. The
// events are synchronized when 1024 calls are pending and when the table is printed.
#pragma once

#include <cstdio>
#include <optional>

#include "kernels/gpu/gpu_kernels.h"

namespace dtensor::kernels::gpu {

// True for "1", false for null, "" and "0"; InvalidArgumentError "[DTENSOR_GPU_PROFILE] must be
// 0 or 1, got 'v'" otherwise.
bool parse_gpu_profile_switch(const char* value);

// Whether DTENSOR_GPU_PROFILE asks for the profile (any value but unset, "" and "0").
bool profile_requested();
// Whether the profile is on in this process (the wrappers were installed and the switch is "1").
bool gpu_profile_enabled();

// Replaces every non-null entry of `table` with a wrapper that times the entry it replaced.
// Called once, before main, after every entry is filled (registration.cc).
void profile_table(Table& table);

// Writes the table of the calls timed since the last print or reset to `out`, waiting for their
// events, and starts a new one. Writes nothing when nothing was timed.
void print_gpu_profile(std::FILE* out);
// Forgets the calls timed so far (after warm-up steps, say).
void reset_gpu_profile();

}  // namespace dtensor::kernels::gpu
