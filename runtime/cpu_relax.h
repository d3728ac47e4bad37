// cpu_relax: the pause a spin-wait makes between two looks at what it waits for (it saves power
// and lets a sibling hardware thread run).
#pragma once

namespace dtensor {

inline void cpu_relax() {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_ia32_pause();
#elif defined(__aarch64__)
  asm volatile("yield");
#endif
}

}  // namespace dtensor
