// detail::symbolize: loaded modules, debug information through addr2line, dladdr otherwise.
#include <gpumem/detail/diagnostics/symbolizer.hpp>

#include <gpumem/detail/diagnostics/child_process.hpp>

#include <cxxabi.h>
#include <dlfcn.h>
#include <elf.h>
#include <link.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <map>
#include <memory>
#include <mutex>
#include <string_view>
#include <unordered_map>
#include <unordered_set>

namespace gpumem::detail {
namespace {

/// Addresses handed to one addr2line run (its command line stays far below the system's limit).
constexpr std::size_t addresses_a_run = 2000;

struct module_info {
  std::string path;  ///< empty: no loaded module holds the address
  std::uintptr_t bias{};
};

/// The file of the running executable ("/proc/self/exe" when its name cannot be read back).
std::string executable_path()
{
  std::string buf(4096, '\0');
  auto const n = ::readlink("/proc/self/exe", buf.data(), buf.size());
  if (n <= 0 || static_cast<std::size_t>(n) >= buf.size()) { return "/proc/self/exe"; }
  buf.resize(static_cast<std::size_t>(n));
  if (buf.ends_with(" (deleted)")) { return "/proc/self/exe"; }
  return buf;
}

/// The loaded module whose segments hold `address`.
module_info module_of(std::uintptr_t address)
{
  struct search {
    std::uintptr_t address;
    std::uintptr_t bias{};
    char const* name{};  ///< the module's name as the loader has it; "" for the main program
  } s{address};
  dl_iterate_phdr(
      [](dl_phdr_info* info, std::size_t, void* data) noexcept {
        auto& s = *static_cast<search*>(data);
        for (int i = 0; i < info->dlpi_phnum; ++i) {
          auto const& ph   = info->dlpi_phdr[i];
          auto const begin = info->dlpi_addr + ph.p_vaddr;
          if (ph.p_type == PT_LOAD && s.address >= begin && s.address < begin + ph.p_memsz) {
            s.bias = info->dlpi_addr;
            s.name = info->dlpi_name != nullptr ? info->dlpi_name : "";
            return 1;
          }
        }
        return 0;
      },
      &s);
  if (s.name == nullptr) { return {}; }
  return {s.name[0] == '\0' ? executable_path() : std::string{s.name}, s.bias};
}

/// True when the ELF file at `path` has something for addr2line: DWARF (built with -g) or a full
/// symbol table (not stripped). Reads only its headers.
bool worth_addr2line(std::string const& path)
{
  std::ifstream f{path, std::ios::binary};
  Elf64_Ehdr eh{};
  if (!f.read(reinterpret_cast<char*>(&eh), sizeof eh) ||
      std::memcmp(eh.e_ident, ELFMAG, SELFMAG) != 0 || eh.e_ident[EI_CLASS] != ELFCLASS64 ||
      eh.e_shentsize != sizeof(Elf64_Shdr) || eh.e_shstrndx >= eh.e_shnum) {
    return false;
  }
  std::vector<Elf64_Shdr> sections(eh.e_shnum);
  f.seekg(static_cast<std::streamoff>(eh.e_shoff));
  if (!f.read(reinterpret_cast<char*>(sections.data()),
              static_cast<std::streamsize>(sections.size() * sizeof(Elf64_Shdr)))) {
    return false;
  }
  auto const& names_section = sections[eh.e_shstrndx];
  std::string names(names_section.sh_size, '\0');
  f.seekg(static_cast<std::streamoff>(names_section.sh_offset));
  if (!f.read(names.data(), static_cast<std::streamsize>(names.size()))) { return false; }
  for (auto const& s : sections) {
    if (s.sh_name >= names.size() || s.sh_type == SHT_NOBITS) { continue; }
    std::string_view const name{names.c_str() + s.sh_name};
    if (name == ".debug_line" || name == ".debug_info" || name == ".symtab") { return true; }
  }
  return false;
}

std::string demangled(char const* name)
{
  int status = 0;
  std::unique_ptr<char, decltype(&std::free)> d{
      abi::__cxa_demangle(name, nullptr, nullptr, &status), &std::free};
  return status == 0 && d ? std::string{d.get()} : std::string{name};
}

std::string hex(std::uintptr_t v)
{
  char buf[32];
  std::snprintf(buf, sizeof buf, "0x%llx", static_cast<unsigned long long>(v));
  return buf;
}

/// "file:line" or "file:line (discriminator 2)" or "??:0" or "??:?" -> a frame's file and line.
void parse_file_line(std::string text, source_frame& f)
{
  if (auto const d = text.find(" (discriminator "); d != std::string::npos) { text.resize(d); }
  auto const colon = text.rfind(':');
  if (colon == std::string::npos) { return; }
  f.file = text.substr(0, colon);
  f.line = static_cast<unsigned>(std::strtoul(text.c_str() + colon + 1, nullptr, 10));
  if (f.file == "??") { f.file.clear(); }
}

/// Splits addr2line's output ("-a -f -i": per address a line "0x<address>", then pairs of
/// lines: function, file:line, innermost first) into the frames of each of `offsets`.
std::vector<std::vector<source_frame>> parse_addr2line(std::string const& out,
                                                       std::vector<std::uintptr_t> const& offsets)
{
  std::vector<std::vector<source_frame>> frames(offsets.size());
  std::size_t next               = 0;  // the index of the next address expected
  std::vector<source_frame>* cur = nullptr;
  bool function_line             = true;
  std::size_t pos                = 0;
  while (pos < out.size()) {
    auto end = out.find('\n', pos);
    if (end == std::string::npos) { end = out.size(); }
    std::string const line = out.substr(pos, end - pos);
    pos                    = end + 1;
    if (next < offsets.size() && line.starts_with("0x") &&
        std::strtoull(line.c_str(), nullptr, 16) == offsets[next]) {
      cur           = &frames[next++];
      function_line = true;
    } else if (cur != nullptr && function_line) {
      cur->push_back({line == "??" ? std::string{} : line, {}, 0});
      function_line = false;
    } else if (cur != nullptr) {
      parse_file_line(line, cur->back());
      function_line = true;
    }
  }
  for (auto& chain : frames) {  // "??" frames name nothing
    std::erase_if(chain, [](source_frame const& f) { return f.function.empty() && f.line == 0; });
  }
  return frames;
}

/// The source frames of each of `offsets` in the module `path`, by addr2line.
std::vector<std::vector<source_frame>> addr2line(std::string const& path,
                                                 std::vector<std::uintptr_t> const& offsets)
{
  std::vector<std::vector<source_frame>> all;
  for (std::size_t first = 0; first < offsets.size(); first += addresses_a_run) {
    auto const last = std::min(offsets.size(), first + addresses_a_run);
    std::vector<std::uintptr_t> const part(offsets.begin() + static_cast<std::ptrdiff_t>(first),
                                           offsets.begin() + static_cast<std::ptrdiff_t>(last));
    std::vector<std::string> argv{"addr2line", "-a", "-f", "-i", "-C", "-e", path};
    for (auto o : part) { argv.push_back(hex(o)); }
    auto const out = run_program(argv);
    auto frames    = out ? parse_addr2line(*out, part) : decltype(all)(part.size());
    for (auto& f : frames) { all.push_back(std::move(f)); }
  }
  return all;
}

/// The cache of every address named so far, and of which modules addr2line can read.
struct cache {
  std::mutex mutex;
  std::unordered_map<std::uintptr_t, code_location> named;  ///< guarded by mutex
  std::unordered_map<std::string, bool> readable;           ///< worth_addr2line; guarded by mutex

  /// Never destroyed: a stack may be written by a static object's destructor at exit.
  static cache& instance()
  {
    static cache& c = *new cache;
    return c;
  }
};

/// What the loader and dladdr know of `address` (no debug information yet).
code_location locate(std::uintptr_t address)
{
  code_location loc;
  loc.address       = address;
  auto const module = module_of(address);
  loc.module        = module.path;
  loc.offset        = address - module.bias;
  Dl_info info{};
  if (::dladdr(reinterpret_cast<void*>(address), &info) != 0 && info.dli_sname != nullptr) {
    loc.symbol        = demangled(info.dli_sname);
    loc.symbol_offset = address - reinterpret_cast<std::uintptr_t>(info.dli_saddr);
  }
  return loc;
}

/// Fills in the source frames of `fresh` from debug information or the symbol table, one
/// addr2line run per module.
void add_source(std::vector<code_location>& fresh, cache& c)
{
  std::map<std::string, std::vector<std::size_t>> by_module;
  for (std::size_t i = 0; i < fresh.size(); ++i) {
    if (!fresh[i].module.empty()) { by_module[fresh[i].module].push_back(i); }
  }
  for (auto const& [path, which] : by_module) {
    auto [known, inserted] = c.readable.try_emplace(path, false);
    if (inserted) { known->second = worth_addr2line(path); }
    if (!known->second) { continue; }
    std::vector<std::uintptr_t> offsets;
    for (auto i : which) { offsets.push_back(fresh[i].offset); }
    auto frames = addr2line(path, offsets);
    for (std::size_t k = 0; k < which.size(); ++k) {
      fresh[which[k]].source = std::move(frames[k]);
    }
  }
}

/// "function (file:line)"; `fallback` names a function that has no name of its own.
std::string source_text(source_frame const& f, std::string const& fallback)
{
  std::string const& name = f.function.empty() ? fallback : f.function;
  return (name.empty() ? std::string{"??"} : name) + " (" + f.file + ":" + std::to_string(f.line) +
         ")";
}

}  // namespace

std::vector<std::string> code_location::texts() const
{
  std::vector<std::string> out{text()};
  if (source.empty() || source.front().file.empty()) { return out; }
  for (std::size_t i = 1; i < source.size(); ++i) { out.push_back(source_text(source[i], "")); }
  return out;
}

std::string code_location::text() const
{
  if (!source.empty() && !source.front().file.empty()) {
    return source_text(source.front(), symbol);
  }
  if (module.empty()) { return hex(address); }
  if (!symbol.empty()) { return module + "(" + symbol + "+" + hex(symbol_offset) + ")"; }
  if (!source.empty() && !source.front().function.empty()) {
    return module + "(" + source.front().function + ")";
  }
  return module + "(+" + hex(offset) + ")";
}

std::vector<code_location> symbolize(std::vector<std::uintptr_t> const& addresses)
{
  auto& c = cache::instance();
  std::lock_guard lock{c.mutex};
  std::vector<code_location> fresh;  // each address not named before, once
  std::unordered_set<std::uintptr_t> seen;
  for (auto a : addresses) {
    if (!c.named.contains(a) && seen.insert(a).second) { fresh.push_back(locate(a)); }
  }
  add_source(fresh, c);
  for (auto& loc : fresh) { c.named[loc.address] = std::move(loc); }
  std::vector<code_location> out;
  out.reserve(addresses.size());
  for (auto a : addresses) { out.push_back(c.named.at(a)); }
  return out;
}

}  // namespace gpumem::detail
