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
  char const* name = std::getenv("GPUMEM_LOG_FILE");  // NOLINT(concurrency-mt-unsafe)
  GPUMEM_EXPECTS(name != nullptr && *name != '\0', logic_error,
                 "logging_resource_adaptor: no log file name was given and the environment "
                 "variable GPUMEM_LOG_FILE is not set; set it or pass a file name or stream");
  return name;
}

}  // namespace gpumem::mr
