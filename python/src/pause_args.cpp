// python/src/pause_args.cpp — the arguments of pause() as Python spells them: `offload` (False,
// True or "file") and `streams` (None or streams).
#include "bindings.hpp"

#include <gpumem/error.hpp>

#include <string>

namespace gpumem::python {

pause_mode to_pause_mode(py::handle offload)
{
  if (offload.is_none()) { return pause_mode::discard; }
  if (py::isinstance<py::bool_>(offload)) {
    return offload.cast<bool>() ? pause_mode::offload : pause_mode::discard;
  }
  if (py::isinstance<py::str>(offload)) {
    auto const s = offload.cast<std::string>();
    if (s == "file") { return pause_mode::offload_to_file; }
    if (s == "host") { return pause_mode::offload; }
  }
  GPUMEM_FAIL(logic_error,
              "pause: offload is False (discard the contents), True or \"host\" (keep "
              "them in pinned host memory) or \"file\" (keep them in a temporary "
              "file); got " +
                  py::repr(offload).cast<std::string>());
}

std::optional<std::vector<cuda_stream_view>> to_streams(py::handle streams)
{
  if (streams.is_none()) { return std::nullopt; }
  std::vector<cuda_stream_view> out;
  for (auto s : py::iter(streams)) { out.push_back(to_stream(s)); }
  return out;
}

}  // namespace gpumem::python
