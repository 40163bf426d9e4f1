// python/src/base.cpp — DeviceMemoryResource (the base every resource derives from) and
// DeviceBuffer (memory owned by a Python object, freed on its stream when the object dies).
#include "bindings.hpp"
#include "byte_size.hpp"

#include <gpumem/error.hpp>
#include <gpumem/mr/capabilities.hpp>
#include <gpumem/mr/per_device_resource.hpp>

#include <cstdio>
#include <exception>
#include <new>
#include <stdexcept>
#include <utility>

namespace gpumem::python {
namespace {

using mr::device_memory_resource;

/// Device memory from a resource, owned by a Python object. Keeps the resource's Python object
/// alive; deallocates on `stream` in its destructor (with the GIL held, from Python).
class device_buffer {
 public:
  device_buffer(std::size_t size, py::handle stream, py::object resource)
      : resource_obj_{std::move(resource)},
        resource_{&to_resource(resource_obj_)},
        stream_{to_stream(stream)}
  {
    py::gil_scoped_release nogil;
    ptr_  = resource_->allocate(size, stream_);
    size_ = size;
  }
  device_buffer(device_buffer const&)            = delete;
  device_buffer& operator=(device_buffer const&) = delete;
  ~device_buffer() { release(); }

  /// Gives the memory back now (idempotent).
  void release() noexcept
  {
    if (ptr_ != nullptr) { resource_->deallocate(std::exchange(ptr_, nullptr), size_, stream_); }
  }
  [[nodiscard]] std::uintptr_t ptr() const { return to_int(ptr_); }
  [[nodiscard]] std::size_t size() const { return ptr_ == nullptr ? 0 : size_; }
  [[nodiscard]] std::uintptr_t stream() const { return to_int(stream_.value()); }
  [[nodiscard]] py::object const& resource() const { return resource_obj_; }

  [[nodiscard]] py::dict cuda_array_interface() const
  {
    py::dict d;
    d["shape"]   = py::make_tuple(size());
    d["typestr"] = "|u1";
    d["data"]    = py::make_tuple(ptr(), false);
    d["version"] = 3;
    d["strides"] = py::none();
    return d;
  }

 private:
  py::object resource_obj_;
  device_memory_resource* resource_;
  cuda_stream_view stream_;
  void* ptr_{};
  std::size_t size_{};
};

void bind_device_memory_resource(py::module_& m)
{
  py::class_<device_memory_resource, holder<device_memory_resource>>(m, "DeviceMemoryResource",
                                                                     py::dynamic_attr(), R"doc(
The base of every gpumem device memory resource (C++ ``gpumem::mr::device_memory_resource``).

``allocate(nbytes, stream)`` returns a device pointer (an int) usable on ``stream``, aligned to at
least 256 bytes; using it on another stream needs synchronization first. Failure raises
OutOfMemoryError (memory exhausted) or BadAlloc. ``deallocate(ptr, nbytes, stream)`` frees it;
``nbytes`` must equal the size asked; the memory may be reused on ``stream`` at once. A request of
0 bytes returns 0. Streams are ints (cudaStream_t), None (the default stream), a CuPy stream or a
PyTorch stream. Prefer DeviceBuffer, which frees automatically.
)doc")
      .def(
          "allocate",
          [](device_memory_resource& r, std::size_t nbytes, py::handle stream) {
            auto const s = to_stream(stream);
            py::gil_scoped_release nogil;
            return to_int(r.allocate(nbytes, s));
          },
          py::arg("nbytes"), py::arg("stream") = py::none(),
          "Allocates `nbytes` on `stream`; returns the device pointer as an int.")
      .def(
          "allocate_aligned",
          [](device_memory_resource& r, std::size_t nbytes, std::size_t alignment,
             py::handle stream) {
            // Above 256 the C++ base pads the request, and only a free that names the alignment
            // finds it again; deallocate here takes none, so such alignments are refused.
            GPUMEM_EXPECTS(alignment <= CUDA_ALLOCATION_ALIGNMENT, logic_error,
                           detail::format("allocate_aligned: alignment must be at most 256, got ",
                                          alignment, "; use AlignedResourceAdaptor for more"));
            auto const s = to_stream(stream);
            py::gil_scoped_release nogil;
            return to_int(r.allocate_async(nbytes, alignment, s));
          },
          py::arg("nbytes"), py::arg("alignment"), py::arg("stream") = py::none(),
          "As allocate, with an alignment (a power of two, at most 256; LogicError otherwise).")
      .def(
          "deallocate",
          [](device_memory_resource& r, std::uintptr_t ptr, std::size_t nbytes, py::handle stream) {
            auto const s = to_stream(stream);
            py::gil_scoped_release nogil;
            r.deallocate(to_ptr(ptr), nbytes, s);
          },
          py::arg("ptr"), py::arg("nbytes"), py::arg("stream") = py::none(),
          "Frees `ptr` (from allocate with the same `nbytes`) on `stream`. Never raises.")
      .def("is_equal", &device_memory_resource::is_equal, py::arg("other"),
           "True when memory from one can be freed by the other.")
      .def("__eq__",
           [](device_memory_resource const& a, device_memory_resource const& b) { return a == b; })
      .def("__hash__",
           [](device_memory_resource const& a) { return py::hash(py::int_(to_int(&a))); })
      .def_property_readonly(
          "_handle", [](device_memory_resource& r) { return to_int(&r); },
          "Address of the C++ object (for the PyTorch allocator shim).")
      .def("__repr__", [](py::handle self) {
        return "<gpumem." + py::type::of(self).attr("__name__").cast<std::string>() + " at 0x" +
               py::str("{:x}")
                   .format(to_int(&self.cast<device_memory_resource&>()))
                   .cast<std::string>() +
               ">";
      });
}

void bind_device_buffer(py::module_& m)
{
  py::class_<device_buffer>(m, "DeviceBuffer", R"doc(
Device memory from a gpumem resource, owned by this object: freed on its stream when the object is
garbage-collected (or at ``release()``). ``resource=None`` takes the current device's resource.
Exposes ``__cuda_array_interface__`` (bytes), so ``cupy.asarray(buf)`` views it without a copy.
)doc")
      .def(py::init([](byte_size size, py::handle stream, py::object resource) {
             if (resource.is_none()) {
               resource = py::module_::import("gpumem").attr("get_current_device_resource")();
             }
             return std::make_unique<device_buffer>(size, stream, std::move(resource));
           }),
           py::arg("size"), py::arg("stream") = py::none(), py::arg("resource") = py::none())
      .def_property_readonly("ptr", &device_buffer::ptr,
                             "The device pointer (an int; 0 once released).")
      .def_property_readonly("size", &device_buffer::size, "Bytes owned (0 once released).")
      .def_property_readonly("nbytes", &device_buffer::size)
      .def_property_readonly("stream", &device_buffer::stream, "The stream it was allocated on.")
      .def_property_readonly("resource", &device_buffer::resource)
      .def_property_readonly("__cuda_array_interface__", &device_buffer::cuda_array_interface)
      .def("release", &device_buffer::release, "Gives the memory back to the resource now.")
      .def("__len__", &device_buffer::size);
}

}  // namespace

mr::device_memory_resource& to_resource(py::handle resource)
{
  if (!py::isinstance<device_memory_resource>(resource)) {
    throw py::type_error("expected a gpumem.DeviceMemoryResource, got " +
                         py::repr(resource).cast<std::string>());
  }
  return resource.cast<device_memory_resource&>();
}

namespace {

// The PyTorch allocator library (_torch_allocator.so) calls resource objects of this module. Each
// library carries its own C++ runtime (-static-libstdc++), so an exception cannot cross from one
// to the other (the process would abort): the allocator library calls these two functions, which
// catch everything here and report it as an error kind and a message (kinds: 0 none,
// 1 out_of_memory, 2 another bad_alloc, 3 logic_error, 4 anything else).
void* call_allocate(void* mr, std::size_t bytes, void* stream, int* kind, char* message,
                    std::size_t capacity) noexcept
{
  auto report = [&](int k, char const* what) {
    *kind = k;
    if (capacity > 0) { std::snprintf(message, capacity, "%s", what); }
    return nullptr;
  };
  *kind = 0;
  try {
    return static_cast<device_memory_resource*>(mr)->allocate(
        bytes, gpumem::cuda_stream_view{static_cast<cudaStream_t>(stream)});
  } catch (gpumem::out_of_memory const& e) {
    return report(1, e.what());
  } catch (std::bad_alloc const& e) {
    return report(2, e.what());
  } catch (std::logic_error const& e) {
    return report(3, e.what());
  } catch (std::exception const& e) {
    return report(4, e.what());
  } catch (...) {
    return report(4, "an unknown error");
  }
}

void call_deallocate(void* mr, void* ptr, std::size_t bytes, void* stream) noexcept
{
  static_cast<device_memory_resource*>(mr)->deallocate(
      ptr, bytes, gpumem::cuda_stream_view{static_cast<cudaStream_t>(stream)});
}

/// Gives the resource's free memory back (empty_cache, and before the retry of an allocation that
/// ran out of memory) when it can (mr::trimmable); 1 when it could, 0 when not or when it failed.
int call_trim(void* mr) noexcept
{
  auto* t = dynamic_cast<mr::trimmable*>(static_cast<device_memory_resource*>(mr));
  if (t == nullptr) { return 0; }
  try {
    t->trim();
    return 1;
  } catch (...) {  // NOLINT(bugprone-empty-catch): the memory stays where it was
    return 0;
  }
}

}  // namespace

void bind_base(py::module_& m)
{
  m.def(
      "_resource_calls",
      [] {
        return py::make_tuple(to_int(reinterpret_cast<void const*>(&call_allocate)),
                              to_int(reinterpret_cast<void const*>(&call_deallocate)),
                              to_int(reinterpret_cast<void const*>(&call_trim)));
      },
      "Addresses of the C functions through which the PyTorch allocator library calls resource "
      "objects of this module (allocate, deallocate, trim).");
  bind_device_memory_resource(m);
  bind_device_buffer(m);
}

}  // namespace gpumem::python
