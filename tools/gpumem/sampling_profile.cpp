// The sampling profiler of `gpumem bench --profile` (see sampling_profile.hpp).
#include "sampling_profile.hpp"

#include <cxxabi.h>
#include <dlfcn.h>
#include <link.h>
#include <signal.h>
#include <ucontext.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <memory>
#include <stdexcept>
#include <unordered_map>

namespace gpumem::tool {
namespace {

struct sample {
  std::uintptr_t pc;
  std::uint32_t label;
};

constexpr std::size_t sample_capacity = std::size_t{1} << 22;  // 64 MiB
constexpr long interval_us            = 100;

// Shared with the signal handler: written before the timer starts, read after it stops.
std::unique_ptr<sample[]> samples;
std::atomic<std::size_t> next_sample{0};
std::atomic<std::uint32_t> current_label{0};  // 0: no measurement
std::atomic<bool> active{false};

void on_sigprof(int, siginfo_t*, void* context)
{
  if (!sampling_profile::measuring) { return; }
  auto const label = current_label.load(std::memory_order_relaxed);
  if (label == 0) { return; }
  auto const i = next_sample.fetch_add(1, std::memory_order_relaxed);
  if (i >= sample_capacity) { return; }
  auto const* uc = static_cast<ucontext_t const*>(context);
#if defined(__x86_64__)
  auto const pc = static_cast<std::uintptr_t>(uc->uc_mcontext.gregs[REG_RIP]);
#elif defined(__aarch64__)
  auto const pc = static_cast<std::uintptr_t>(uc->uc_mcontext.pc);
#else
  std::uintptr_t const pc = 0;
  (void)uc;
#endif
  samples[i] = {pc, label};
}

std::string demangled(char const* name)
{
  int status = 0;
  std::unique_ptr<char, decltype(&std::free)> d{
      abi::__cxa_demangle(name, nullptr, nullptr, &status), &std::free};
  return status == 0 && d ? std::string{d.get()} : std::string{name};
}

/// `name` without template arguments and parameters: "a::b<…>::f".
std::string short_name(std::string const& name)
{
  std::string out;
  int depth = 0;
  for (std::size_t i = 0; i < name.size(); ++i) {
    char const ch = name[i];
    if (depth == 0 && ch == '(') {
      if (name.compare(i, 21, "(anonymous namespace)") != 0) { break; }
      out += "(anonymous namespace)";
      i += 20;
    } else if (ch == '<') {
      if (depth++ == 0) { out += "<…>"; }
    } else if (ch == '>' && depth > 0) {
      --depth;
    } else if (depth == 0) {
      out += ch;
    }
  }
  return out.empty() ? name : out;
}

/// The main program's load bias and the address ranges of its loaded segments.
struct main_program {
  std::uintptr_t bias{};
  std::vector<std::pair<std::uintptr_t, std::uintptr_t>> ranges;
  [[nodiscard]] bool contains(std::uintptr_t pc) const
  {
    return std::any_of(ranges.begin(), ranges.end(),
                       [pc](auto const& r) { return pc >= r.first && pc < r.second; });
  }
};

main_program find_main_program()
{
  main_program m;
  dl_iterate_phdr(
      [](dl_phdr_info* info, std::size_t, void* out) {
        auto& mp = *static_cast<main_program*>(out);
        mp.bias  = info->dlpi_addr;
        for (int i = 0; i < info->dlpi_phnum; ++i) {
          auto const& ph = info->dlpi_phdr[i];
          if (ph.p_type == PT_LOAD) {
            mp.ranges.emplace_back(info->dlpi_addr + ph.p_vaddr,
                                   info->dlpi_addr + ph.p_vaddr + ph.p_memsz);
          }
        }
        return 1;  // the first object is the main program
      },
      &m);
  return m;
}

/// Names the main program's addresses (offsets from its bias) with addr2line, when installed;
/// an empty map otherwise.
std::unordered_map<std::uintptr_t, std::string> addr2line(std::vector<std::uintptr_t> const& at)
{
  std::unordered_map<std::uintptr_t, std::string> names;
  if (at.empty()) { return names; }
  auto const list = std::filesystem::temp_directory_path() /
                    ("gpumem-profile-" + std::to_string(getpid()) + ".txt");
  {
    std::ofstream f{list};
    for (auto a : at) { f << std::hex << "0x" << a << "\n"; }
  }
  auto const exe = std::filesystem::read_symlink("/proc/self/exe").string();
  // -a: each address first; -i: then the inlined functions from the innermost out.
  auto const cmd = "addr2line -a -f -i -C -e '" + exe + "' < '" + list.string() + "' 2>/dev/null";
  if (FILE* p = popen(cmd.c_str(), "r")) {
    char line[8192];
    std::uintptr_t at_now = 0;
    std::vector<std::string> chain;  // innermost first
    auto finish = [&] {
      while (!chain.empty() && chain.back() == "??") { chain.pop_back(); }
      if (!chain.empty()) {
        auto const inner = short_name(chain.front());
        auto const outer = short_name(chain.back());
        names[at_now]    = inner == outer ? inner : inner + " (in " + outer + ")";
      }
      chain.clear();
    };
    bool function_line = true;  // lines alternate: function, file:line
    while (std::fgets(line, sizeof line, p) != nullptr) {
      std::string text{line};
      if (!text.empty() && text.back() == '\n') { text.pop_back(); }
      if (text.rfind("0x", 0) == 0) {
        finish();
        at_now        = std::stoull(text, nullptr, 16);
        function_line = true;
      } else {
        if (function_line) { chain.push_back(text); }
        function_line = !function_line;
      }
    }
    finish();
    pclose(p);
  }
  std::error_code ec;
  std::filesystem::remove(list, ec);
  return names;
}

/// A function name for every distinct address.
std::unordered_map<std::uintptr_t, std::string> name_addresses(
    std::vector<std::uintptr_t> const& pcs)
{
  auto const mp = find_main_program();
  std::unordered_map<std::uintptr_t, std::string> names;
  std::vector<std::uintptr_t> in_main;
  for (auto pc : pcs) {
    if (mp.contains(pc)) {
      in_main.push_back(pc - mp.bias);
      continue;
    }
    Dl_info info{};
    if (dladdr(reinterpret_cast<void*>(pc), &info) == 0 || info.dli_fname == nullptr) {
      names[pc] = "[unknown]";
    } else if (info.dli_sname != nullptr) {
      names[pc] = short_name(demangled(info.dli_sname)) + " [" +
                  std::filesystem::path{info.dli_fname}.filename().string() + "]";
    } else {
      names[pc] = "[" + std::filesystem::path{info.dli_fname}.filename().string() + "]";
    }
  }
  auto const resolved = addr2line(in_main);
  for (auto off : in_main) {
    auto it = resolved.find(off);
    char buf[64];
    std::snprintf(buf, sizeof buf, "gpumem+0x%zx", static_cast<std::size_t>(off));
    names[off + mp.bias] = it != resolved.end() ? it->second : std::string{buf};
  }
  return names;
}

}  // namespace

sampling_profile::measured_scope::measured_scope() noexcept
{
  measuring = true;
  if (!active.load()) { return; }
  sigevent ev{};
  ev.sigev_notify          = SIGEV_THREAD_ID;
  ev.sigev_signo           = SIGPROF;
  ev._sigev_un._tid        = static_cast<int>(gettid());
  constexpr long period_ns = interval_us * 1000;
  itimerspec const every{{0, period_ns}, {0, period_ns}};
  if (timer_create(CLOCK_MONOTONIC, &ev, &timer_) == 0) {
    armed_ = true;
    timer_settime(timer_, 0, &every, nullptr);
  }
}

sampling_profile::measured_scope::~measured_scope()
{
  if (armed_) { timer_delete(timer_); }
  measuring = false;
}

sampling_profile::sampling_profile()
{
  if (active.exchange(true)) { throw std::runtime_error{"a profile is already running"}; }
  samples = std::make_unique<sample[]>(sample_capacity);
  next_sample.store(0);
  struct sigaction sa {};
  sa.sa_sigaction = &on_sigprof;
  sa.sa_flags     = SA_SIGINFO | SA_RESTART;
  sigemptyset(&sa.sa_mask);
  if (sigaction(SIGPROF, &sa, nullptr) != 0) {
    active.store(false);
    throw std::runtime_error{"--profile: could not install the SIGPROF handler"};
  }
  labels_.emplace_back();  // label 0: no measurement
}

sampling_profile::~sampling_profile()
{
  stop();
  active.store(false);
}

void sampling_profile::stop() noexcept
{
  if (stopped_) { return; }
  stopped_ = true;
  current_label.store(0);
  signal(SIGPROF, SIG_IGN);  // a signal already on its way finds no handler to run
}

void sampling_profile::begin(std::string const& label)
{
  labels_.push_back(label);
  current_label.store(static_cast<std::uint32_t>(labels_.size() - 1));
}

void sampling_profile::end() noexcept
{
  current_label.store(0);
}

void sampling_profile::write(std::ostream& out, double min_percent, std::size_t top)
{
  stop();
  auto const taken = next_sample.load();
  auto const n     = std::min(taken, sample_capacity);
  std::vector<std::uintptr_t> pcs;
  pcs.reserve(n);
  for (std::size_t i = 0; i < n; ++i) { pcs.push_back(samples[i].pc); }
  std::sort(pcs.begin(), pcs.end());
  pcs.erase(std::unique(pcs.begin(), pcs.end()), pcs.end());
  auto const names = name_addresses(pcs);
  std::vector<std::map<std::string, std::size_t>> per_label(labels_.size());
  std::vector<std::size_t> totals(labels_.size());
  for (std::size_t i = 0; i < n; ++i) {
    ++per_label[samples[i].label][names.at(samples[i].pc)];
    ++totals[samples[i].label];
  }
  out << "profile: where the measured threads were, sampled every " << interval_us
      << " us of each one's wall-clock time, by function";
  if (taken > n) { out << " (" << taken - n << " samples dropped: the buffer was full)"; }
  out << "\n";
  for (std::size_t l = 1; l < labels_.size(); ++l) {
    out << "\n" << labels_[l] << ": " << totals[l] << " samples\n";
    std::vector<std::pair<std::size_t, std::string>> rows;
    for (auto const& [fn, count] : per_label[l]) { rows.emplace_back(count, fn); }
    std::sort(rows.rbegin(), rows.rend());
    for (std::size_t i = 0; i < rows.size() && i < top; ++i) {
      double const pct =
          100.0 * static_cast<double>(rows[i].first) / static_cast<double>(totals[l]);
      if (pct < min_percent) { break; }
      char buf[32];
      std::snprintf(buf, sizeof buf, "%6.1f%%  ", pct);
      auto fn = rows[i].second;
      if (fn.size() > 150) { fn = fn.substr(0, 147) + "..."; }
      out << buf << fn << "\n";
    }
  }
}

}  // namespace gpumem::tool
