// The three stable-ABI symbols torch 2.13+ exports that vLLM 0.33.0's
// extensions may import and torch 2.11 lacks, for LD_PRELOAD on the lent
// GPU machine (torch 2.11.0). Optional for the GLM-5.3 run: of the carried
// extensions none imports them (only _qutlass_C does, which is not carried
// and is imported by vLLM inside contextlib.suppress(ImportError)); the
// shim is for a payload that carries such an extension. docs/vllm.md
// ("GPU run") has the symbol table this was read from.
//
// Build (on the GPU machine; stage.sh install does it):
//   TORCH_INC=$(python3 -c 'import torch,os;print(os.path.join(os.path.dirname(torch.__file__),"include"))')
//   g++ -O2 -std=c++17 -shared -fPIC -Wall -Werror -I"$TORCH_INC"
//       -o /tmp/vsite/libtorch_abi_shim.so benchmarks/vllm_gpu/torch_abi_shim.cpp -ldl
// Use: LD_PRELOAD=/tmp/vsite/libtorch_abi_shim.so python3 ...
//
// Semantics (torch 2.14 include/torch/csrc/stable/c/shim.h, macros.h,
// stableivalue_conversions.h):
// - torch_new_stable_ivalue(StableIValue** ret): a heap StableIValue (a
//   uint64_t) the caller fills; freed by torch_delete_stable_ivalue or by the
//   dispatcher that receives it (a boxed std::optional<T>). Torch 2.11's
//   dispatcher frees such a pointer with C++ `delete` (extensions built for
//   2.11 pass `new StableIValue(...)`), so `new` here is the faithful
//   allocation. Implemented exactly.
// - torch_delete_stable_ivalue(StableIValue*): its pair, `delete`; nullptr is
//   a failure, as documented. (Torch 2.11 lacks it too; no carried
//   extension imports it.)
// - torch_exception_get_what[_without_backtrace](): the message of the last
//   exception caught at the C shim boundary in this thread. Torch 2.11
//   keeps no such record (its shims only LOG(ERROR) "Exception in
//   aoti_torch: ..." to stderr), so this returns nullptr: the documented
//   "no information" value, on which the extension's error path
//   (torch::stable::detail::throw_exception) still throws, naming the
//   failed call, file and line. Not faithful: the message itself is only
//   in the stderr line above. Each first use prints one line to stderr.
//
// When the running libtorch already exports a symbol (torch >= 2.13), each
// function forwards to it (dlsym RTLD_NEXT, else the loaded libtorch_cpu.so:
// torch loads it RTLD_LOCAL), so preloading is harmless there.

#include <dlfcn.h>

#include <atomic>
#include <cstdint>
#include <cstdio>
#include <new>

#include <torch/csrc/inductor/aoti_torch/c/macros.h>

using StableIValue = uint64_t;

namespace {

template <typename F>
F next_symbol(const char* name) {
  void* p = dlsym(RTLD_NEXT, name);
  if (p == nullptr) {
    if (void* torch_cpu = dlopen("libtorch_cpu.so", RTLD_LAZY | RTLD_NOLOAD)) {
      p = dlsym(torch_cpu, name);
      dlclose(torch_cpu);
    }
  }
  return reinterpret_cast<F>(p);
}

void note_once(std::atomic<bool>& flag, const char* what) {
  if (!flag.exchange(true)) {
    std::fprintf(stderr,
                 "torch_abi_shim: %s: torch %s lacks it; using the shim (%s)\n",
                 what, "< 2.13",
                 "message not recorded by this torch: returns NULL");
  }
}

std::atomic<bool> noted_what{false};
std::atomic<bool> noted_what_nb{false};

}  // namespace

extern "C" {

AOTI_TORCH_EXPORT const char* torch_exception_get_what() {
  using F = const char* (*)();
  static F next = next_symbol<F>("torch_exception_get_what");
  if (next != nullptr && next != &torch_exception_get_what) {
    return next();
  }
  note_once(noted_what, "torch_exception_get_what");
  return nullptr;
}

AOTI_TORCH_EXPORT const char* torch_exception_get_what_without_backtrace() {
  using F = const char* (*)();
  static F next = next_symbol<F>("torch_exception_get_what_without_backtrace");
  if (next != nullptr && next != &torch_exception_get_what_without_backtrace) {
    return next();
  }
  note_once(noted_what_nb, "torch_exception_get_what_without_backtrace");
  return nullptr;
}

AOTI_TORCH_EXPORT AOTITorchError torch_new_stable_ivalue(StableIValue** ret_value) {
  using F = AOTITorchError (*)(StableIValue**);
  static F next = next_symbol<F>("torch_new_stable_ivalue");
  if (next != nullptr && next != &torch_new_stable_ivalue) {
    return next(ret_value);
  }
  if (ret_value == nullptr) {
    return AOTI_TORCH_FAILURE;
  }
  *ret_value = new (std::nothrow) StableIValue(0);
  return *ret_value != nullptr ? AOTI_TORCH_SUCCESS : AOTI_TORCH_FAILURE;
}

AOTI_TORCH_EXPORT AOTITorchError torch_delete_stable_ivalue(StableIValue* value) {
  using F = AOTITorchError (*)(StableIValue*);
  static F next = next_symbol<F>("torch_delete_stable_ivalue");
  if (next != nullptr && next != &torch_delete_stable_ivalue) {
    return next(value);
  }
  if (value == nullptr) {
    return AOTI_TORCH_FAILURE;
  }
  delete value;
  return AOTI_TORCH_SUCCESS;
}

}  // extern "C"
