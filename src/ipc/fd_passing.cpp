// Passing file descriptors over Unix sockets (SCM_RIGHTS) and the owned_fd destructor. No CUDA.
#include <gpumem/detail/format.hpp>
#include <gpumem/error.hpp>
#include <gpumem/ipc/fd_passing.hpp>
#include <gpumem/ipc/owned_fd.hpp>

#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <system_error>

namespace gpumem {

void owned_fd::reset() noexcept
{
  if (fd_ >= 0) { (void)::close(fd_); }
  fd_ = -1;
}

namespace {

constexpr std::size_t max_payload = 4096;

union control_buffer {
  char buf[CMSG_SPACE(sizeof(int))];
  cmsghdr align;
};

}  // namespace

void send_with_fd(int socket, std::span<std::byte const> payload, int fd)
{
  GPUMEM_EXPECTS(!payload.empty() && payload.size() <= max_payload, logic_error,
                 detail::format("send_with_fd: payload must be 1..", max_payload, " bytes, got ",
                                payload.size()));
  iovec iov{const_cast<std::byte*>(payload.data()), payload.size()};
  msghdr msg{};
  msg.msg_iov    = &iov;
  msg.msg_iovlen = 1;
  control_buffer control{};
  if (fd >= 0) {
    msg.msg_control    = control.buf;
    msg.msg_controllen = sizeof control.buf;
    cmsghdr* c         = CMSG_FIRSTHDR(&msg);
    c->cmsg_level      = SOL_SOCKET;
    c->cmsg_type       = SCM_RIGHTS;
    c->cmsg_len        = CMSG_LEN(sizeof(int));
    std::memcpy(CMSG_DATA(c), &fd, sizeof(int));
  }
  ssize_t const sent = ::sendmsg(socket, &msg, MSG_NOSIGNAL);
  if (sent < 0) { throw std::system_error{errno, std::generic_category(), "send_with_fd"}; }
  GPUMEM_EXPECTS(static_cast<std::size_t>(sent) == payload.size(), logic_error,
                 detail::format("send_with_fd: sent ", sent, " of ", payload.size(), " bytes"));
}

owned_fd receive_with_fd(int socket, std::span<std::byte> payload)
{
  iovec iov{payload.data(), payload.size()};
  msghdr msg{};
  msg.msg_iov    = &iov;
  msg.msg_iovlen = 1;
  control_buffer control{};
  msg.msg_control    = control.buf;
  msg.msg_controllen = sizeof control.buf;
  ssize_t const got  = ::recvmsg(socket, &msg, MSG_WAITALL | MSG_CMSG_CLOEXEC);
  if (got < 0) { throw std::system_error{errno, std::generic_category(), "receive_with_fd"}; }
  owned_fd fd;
  for (cmsghdr* c = CMSG_FIRSTHDR(&msg); c != nullptr; c = CMSG_NXTHDR(&msg, c)) {
    if (c->cmsg_level == SOL_SOCKET && c->cmsg_type == SCM_RIGHTS) {
      int raw{};
      std::memcpy(&raw, CMSG_DATA(c), sizeof(int));
      fd = owned_fd{raw};
    }
  }
  GPUMEM_EXPECTS(static_cast<std::size_t>(got) == payload.size(), logic_error,
                 detail::format("receive_with_fd: expected ", payload.size(), " bytes, got ", got,
                                got == 0 ? " (peer closed the socket)" : ""));
  return fd;
}

}  // namespace gpumem
