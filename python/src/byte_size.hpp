// python/src/byte_size.hpp — a size argument: an int (bytes) or a string with a unit ("1GiB",
// "512MiB", "1.5GB"; the command-line tool's spelling, spec::parse_size). A negative int raises
// LogicError (ValueError) naming the value; a string that is not a size raises SpecError
// (a LogicError) naming the text; any other type falls through to pybind11's TypeError.
#pragma once

#include <gpumem/detail/format.hpp>
#include <gpumem/error.hpp>
#include <gpumem/spec/resource_spec.hpp>

#include <pybind11/pybind11.h>

#include <cstddef>
#include <limits>
#include <string>

namespace gpumem::python {

struct byte_size {
  std::size_t bytes{};
  operator std::size_t() const noexcept { return bytes; }  // NOLINT: a size is a size
};

}  // namespace gpumem::python

namespace pybind11::detail {

template <>
struct type_caster<gpumem::python::byte_size> {
  PYBIND11_TYPE_CASTER(gpumem::python::byte_size, const_name("int | str"));

  bool load(handle src, bool /*convert*/)
  {
    if (PyBool_Check(src.ptr())) { return false; }
    if (PyLong_Check(src.ptr())) {
      auto const v = reinterpret_borrow<int_>(src);
      if (v < int_(0) || v > int_(std::numeric_limits<std::size_t>::max())) {
        throw gpumem::logic_error{gpumem::detail::format(
            "a size must be a number of bytes from 0 to 2^64 - 1 or a string such as '1GiB', "
            "got ",
            std::string(str(src)))};
      }
      value.bytes = v.cast<std::size_t>();
      return true;
    }
    if (PyUnicode_Check(src.ptr())) {
      value.bytes = gpumem::spec::parse_size(src.cast<std::string>());
      return true;
    }
    return false;
  }
};

}  // namespace pybind11::detail
