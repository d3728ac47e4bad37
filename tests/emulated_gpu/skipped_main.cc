// The emulated GPU suite in a --config=cuda build: the CUDA backend owns the GPU there, so there
// is nothing to emulate.
#include <cstdio>

int main() {
  std::printf("emulated GPU suite skipped: a --config=cuda build runs the GPU suite on CUDA\n");
  return 0;
}
