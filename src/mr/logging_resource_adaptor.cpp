// Sinks and the default file name of logging_resource_adaptor (the one getenv of the library).
#include <gpumem/mr/logging_resource_adaptor.hpp>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <stdexcept>

namespace gpumem::mr {

log_sink_ptr make_file_sink(std::string const& filename)
{
  auto file = std::make_shared<std::ofstream>(filename, std::ios::out | std::ios::trunc);
  if (!file->is_open()) {
    throw std::runtime_error{detail::format("logging_resource_adaptor: cannot open log file '",
                                            filename, "': ", std::strerror(errno))};
  }
  return file;
}

log_sink_ptr make_ostream_sink(std::ostream& os)
{
  return {&os, [](std::ostream*) {}};  // not owned
}

std::string logging_default_filename()
{
  // GPUMEM_LOG_FILE first; RMM_LOG_FILE so that programs set up for RMM log without changes.
  for (char const* variable : {"GPUMEM_LOG_FILE", "RMM_LOG_FILE"}) {
    char const* name = std::getenv(variable);  // NOLINT(concurrency-mt-unsafe)
    if (name != nullptr && *name != '\0') { return name; }
  }
  GPUMEM_FAIL(logic_error,
              "logging_resource_adaptor: no log file name was given and neither GPUMEM_LOG_FILE "
              "nor RMM_LOG_FILE is set; set one or pass a file name or stream");
}

}  // namespace gpumem::mr
