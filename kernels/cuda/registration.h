// How the CUDA kernels fill the kernel front's GPU table (kernels/gpu/gpu_kernels.h): each file
// of //kernels/cuda hands its entries over in one function, and registration.cc calls them all
// from one static initializer, in a fixed order, before main. One place, so that the GPU profile
// (profile.h) can wrap the entries after every file has filled its own. Internal to
// //kernels/cuda.
#pragma once

#include "kernels/gpu/gpu_kernels.h"

namespace dtensor::kernels::gpu {

void register_conv_kernels(Table& table);
void register_elementwise_kernels(Table& table);
void register_matmul_kernels(Table& table);
void register_memory_kernels(Table& table);
void register_nn_kernels(Table& table);
void register_pool_kernels(Table& table);
void register_shape_ops_kernels(Table& table);

}  // namespace dtensor::kernels::gpu
