// Offloading a paused range's contents to a file and reading them back. See detail/vmm_backing.hpp
// and docs/design.md ("Pause and resume").

#include <gpumem/detail/vmm_backing.hpp>
#include <gpumem/align.hpp>
#include <gpumem/error.hpp>

#include <algorithm>

namespace gpumem::detail {

// Two slots, each at most file_slot_bytes and at most half the layout (a small pool pins no more
// than its size), page-aligned.
std::size_t vmm_backing::file_ring_bytes() const noexcept
{
  constexpr std::size_t page = 4096;
  auto const half            = align_up((mapped_bytes_ + file_slots - 1) / file_slots, page);
  return file_slots * std::min(file_slot_bytes, half);
}

namespace {

struct file_piece {  // one copy through a slot: part of one chunk
  char* at{};
  std::size_t bytes{};
  std::size_t offset{};  // in the file
  bool last{};           // the chunk's last piece: once written, the chunk can be given back
};

}  // namespace

// Copies each chunk, a slot at a time, to the staging ring on `stream` and writes each slot to the
// file once its copy is done, while the next slot's copy runs; a chunk is given back once all of
// its bytes are in the file. A failed copy or write puts back what was given back (read back from
// the file), so the pool is as before.
void vmm_backing::write_all(std::vector<chunk> const& order, cudaStream_t stream)
{
  std::size_t given_back = 0;
  try {
    pinned_ring ring{*runtime_, staging_, file_ring_bytes() / file_slots, file_slots};
    std::vector<file_piece> pieces;
    for (auto const& c : order) {
      auto const base = mapped_.find(c.at)->second.staged;
      for (std::size_t off = 0; off < c.bytes; off += ring.slot_bytes()) {
        auto const n = std::min(ring.slot_bytes(), c.bytes - off);
        pieces.push_back({c.at + off, n, base + off, off + n == c.bytes});
      }
    }
    std::size_t written = 0;
    auto write_next     = [&] {
      auto const& p = pieces[written];
      ring.wait(written);
      file_.write(ring.slot(written), p.bytes, p.offset);
      ++written;
      if (p.last) { give_back(order[given_back++]); }
    };
    for (auto const& p : pieces) {
      auto const turn = ring.take();
      if (turn >= ring.slots()) { write_next(); }  // the slot's previous piece, first
      runtime_->memcpy_async(ring.slot(turn), p.at, p.bytes, stream);
      ring.record(turn, stream);
    }
    while (written < pieces.size()) { write_next(); }
  } catch (...) {
    undo_pause(given_back, stream);
    throw;
  }
}

// Reads [offset, offset + bytes) of the file into the ring's slots and queues each slot's copy to
// `at` on `stream`; a slot is read into again once its previous copy is done.
void vmm_backing::read_back(pinned_ring& ring, char* at, std::size_t offset, std::size_t bytes,
                            cudaStream_t stream)
{
  for (std::size_t off = 0; off < bytes; off += ring.slot_bytes()) {
    auto const n    = std::min(ring.slot_bytes(), bytes - off);
    auto const turn = ring.take();
    ring.wait(turn);
    file_.read(ring.slot(turn), n, offset + off);
    runtime_->memcpy_async(at + off, ring.slot(turn), n, stream);
    ring.record(turn, stream);
  }
}

}  // namespace gpumem::detail
