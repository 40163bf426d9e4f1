// gpumem/ipc/fd_passing.hpp — sending an exported pool's file descriptor to another process over
// a Unix-domain socket (SCM_RIGHTS), with a small payload (e.g. pointer_export_data and an
// ipc_event_handle) in the same message. POSIX only; no CUDA.
#pragma once

#include <gpumem/ipc/owned_fd.hpp>

#include <cstddef>
#include <span>

namespace gpumem {

/// Sends `payload` (1..4096 bytes) and, when `fd` >= 0, a duplicate of `fd` over the connected
/// Unix socket `socket`. Throws logic_error for bad arguments, std::system_error when sendmsg
/// fails.
void send_with_fd(int socket, std::span<std::byte const> payload, int fd = -1);

/// Receives exactly payload.size() bytes and the descriptor sent with them (empty owned_fd when
/// none came). Throws std::system_error on failure, logic_error when the peer closed or sent a
/// different amount.
[[nodiscard]] owned_fd receive_with_fd(int socket, std::span<std::byte> payload);

}  // namespace gpumem
