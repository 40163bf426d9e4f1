// gpumem/detail/thread_cache/cache_options.hpp — the names the cache's own code uses for the
// adaptor's configuration and statistics (not API: they are public in
// gpumem/mr/thread_cache_options.hpp).
#pragma once

#include <gpumem/mr/thread_cache_options.hpp>

namespace gpumem::detail::thread_cache {

using options      = mr::thread_cache_options;
using thread_stats = mr::thread_cache_thread_stats;
using stats        = mr::thread_cache_stats;

}  // namespace gpumem::detail::thread_cache
