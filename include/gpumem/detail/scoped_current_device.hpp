// gpumem/detail/scoped_current_device.hpp — makes a device current for a scope and restores the
// previous one at its end (RAII). Switches only when the device differs. Not API.
//
// Throws: what runtime::current_device / set_device throw, from the constructor only; the
// destructor never throws (a failed restore is ignored: there is nobody to report to).
#pragma once

#include <gpumem/detail/runtime.hpp>

namespace gpumem::detail {

class scoped_current_device {
 public:
  explicit scoped_current_device(int device, runtime& rt = cuda_runtime())
      : runtime_{&rt}, previous_{rt.current_device()}
  {
    if (previous_ == device) {
      runtime_ = nullptr;  // nothing to restore
      return;
    }
    rt.set_device(device);
  }

  ~scoped_current_device()
  {
    if (runtime_ == nullptr) { return; }
    try {
      runtime_->set_device(previous_);
    } catch (...) {  // NOLINT(bugprone-empty-catch): a destructor cannot report
    }
  }

  scoped_current_device(scoped_current_device const&)            = delete;
  scoped_current_device& operator=(scoped_current_device const&) = delete;
  scoped_current_device(scoped_current_device&&)                 = delete;
  scoped_current_device& operator=(scoped_current_device&&)      = delete;

 private:
  runtime* runtime_;  ///< null when the device was already current
  int previous_;      ///< the device current at construction
};

}  // namespace gpumem::detail
