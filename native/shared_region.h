// The memory a router's state lives in: process-private (anonymous) or a file that several
// processes map MAP_SHARED, so that their picks see each other's leases as one process
// would. Everything in it is plain data at fixed offsets: no pointers, no heap-owned
// members, only lock-free atomics and process-shared robust mutexes.
//
// Writers: the process that created the region is the only one that publishes membership
// and parameters (meta_mutex, version counters); every process takes and releases leases
// on the slots (atomics) and records them in its own HeldCount row, so that the leases of a
// process that died can be released by the creator (RouterState::release_process).
//
// Pages are committed only when touched (anonymous memory, or a sparse file on tmpfs), so
// the fixed capacities cost address space, not memory, until used.
#pragma once
#include <fcntl.h>
#include <pthread.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstdint>
#include <cstring>
#include <memory>
#include <string>

#include "load.h"
#include "snapshot.h"

namespace pr {

constexpr uint64_t kRegionMagic = 0x31657461'74732d72ULL;  // "r-state1" little-endian
constexpr uint32_t kLayoutVersion = 1;
constexpr uint32_t kMaxProcesses = 64;
// The serialised membership (ids, weights, groups, slots, index capacities) of up to 4096
// instances with ids of up to 3 KiB.
constexpr uint64_t kBlobCapacity = uint64_t{16} << 20;

// A process-shared mutex whose owner may die holding it. lock() returns true when the
// previous owner died inside: the data it guards may be half-written, and the caller repairs
// or clears it.
struct RobustMutex {
  pthread_mutex_t m;
  void init() {
    pthread_mutexattr_t a;
    pthread_mutexattr_init(&a);
    pthread_mutexattr_setpshared(&a, PTHREAD_PROCESS_SHARED);
    pthread_mutexattr_setrobust(&a, PTHREAD_MUTEX_ROBUST);
    pthread_mutex_init(&m, &a);
    pthread_mutexattr_destroy(&a);
  }
  bool lock_repairing() {
    if (pthread_mutex_lock(&m) == EOWNERDEAD) {
      pthread_mutex_consistent(&m);
      return true;
    }
    return false;
  }
  // For std::lock_guard, where a torn structure is acceptable to the caller.
  void lock() { lock_repairing(); }
  void unlock() { pthread_mutex_unlock(&m); }
};

struct RegionHeader {
  std::atomic<uint64_t> magic;  // written last by the creator: an attacher never sees a half-built region
  uint32_t layout;
  uint32_t slot_capacity;
  uint32_t vnodes;
  uint32_t processes;
  uint64_t size;
  uint64_t slots_offset, ids_offset, held_offset, blob_offset, index_offset, index_bytes;
  uint32_t index_nodes;  // the prefix index's node pool (prefix_index.h)
  int32_t creator_pid;

  // Bumped (under meta) by every publication; a process rebuilds its local snapshot when the
  // value differs from its snapshot's. members_version moves only with the membership.
  alignas(64) std::atomic<uint64_t> version;
  std::atomic<uint64_t> members_version;
  alignas(64) RobustMutex meta;
  RoutingParams params;  // under meta
  uint64_t blob_len;     // under meta
  // Leases of any process released by the garbage collector, not by the embedder.
  alignas(64) std::atomic<uint64_t> leases_collected;
  // Process table: the pid owning each HeldCount row, 0 for a free row.
  alignas(64) std::atomic<int32_t> pids[kMaxProcesses];
};

class Region {
 public:
  // path empty: process-private memory. Otherwise a new file at path (which must not
  // exist), mapped shared. On failure returns null and says why in *err.
  static std::unique_ptr<Region> create(const std::string& path, uint32_t slot_capacity, uint32_t vnodes,
                                        uint32_t index_nodes, uint64_t index_bytes, std::string* err) {
    const uint32_t procs = path.empty() ? 0 : kMaxProcesses;
    Layout l = layout(slot_capacity, procs, index_bytes);
    int fd = -1;
    if (!path.empty()) {
      fd = ::open(path.c_str(), O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
      if (fd < 0) { *err = "cannot create '" + path + "': " + std::strerror(errno); return nullptr; }
      if (::ftruncate(fd, static_cast<off_t>(l.size)) != 0) {
        *err = "cannot size '" + path + "': " + std::strerror(errno);
        ::close(fd);
        ::unlink(path.c_str());
        return nullptr;
      }
    }
    void* base = ::mmap(nullptr, l.size, PROT_READ | PROT_WRITE, path.empty() ? MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE : MAP_SHARED, fd, 0);
    if (fd >= 0) ::close(fd);
    if (base == MAP_FAILED) {
      *err = std::string("cannot map the router state: ") + std::strerror(errno);
      if (!path.empty()) ::unlink(path.c_str());
      return nullptr;
    }
    std::unique_ptr<Region> r(new Region(base, l.size, path, true));
    // Fresh pages are zero, which is every counter's initial value: only the header is set.
    RegionHeader* h = r->header();
    h->layout = kLayoutVersion;
    h->slot_capacity = slot_capacity;
    h->vnodes = vnodes;
    h->processes = procs;
    h->size = l.size;
    h->slots_offset = l.slots;
    h->ids_offset = l.ids;
    h->held_offset = l.held;
    h->blob_offset = l.blob;
    h->index_offset = l.index;
    h->index_bytes = index_bytes;
    h->index_nodes = index_nodes;
    h->creator_pid = static_cast<int32_t>(::getpid());
    h->meta.init();
    h->params = RoutingParams();
    h->magic.store(kRegionMagic, std::memory_order_release);
    return r;
  }

  static std::unique_ptr<Region> attach(const std::string& path, std::string* err) {
    const int fd = ::open(path.c_str(), O_RDWR | O_CLOEXEC);
    if (fd < 0) { *err = "cannot open '" + path + "': " + std::strerror(errno); return nullptr; }
    struct stat st;
    if (::fstat(fd, &st) != 0 || static_cast<uint64_t>(st.st_size) < sizeof(RegionHeader)) {
      ::close(fd);
      *err = "'" + path + "' is not a router state file (too small)";
      return nullptr;
    }
    const size_t size = static_cast<size_t>(st.st_size);
    void* base = ::mmap(nullptr, size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    ::close(fd);
    if (base == MAP_FAILED) { *err = std::string("cannot map '") + path + "': " + std::strerror(errno); return nullptr; }
    std::unique_ptr<Region> r(new Region(base, size, path, false));
    const RegionHeader* h = r->header();
    if (h->magic.load(std::memory_order_acquire) != kRegionMagic) {
      *err = "'" + path + "' is not a router state file";
      return nullptr;
    }
    const Layout l = layout(h->slot_capacity, h->processes, h->index_bytes);
    if (h->index_bytes < uint64_t{h->index_nodes} * 40) {
      *err = "'" + path + "' has an inconsistent header";
      return nullptr;
    }
    if (h->layout != kLayoutVersion || h->size != size || l.size != size || h->slots_offset != l.slots || h->ids_offset != l.ids ||
        h->held_offset != l.held || h->blob_offset != l.blob || h->index_offset != l.index) {
      *err = "'" + path + "' was made by another version of prefix-router";
      return nullptr;
    }
    return r;
  }

  ~Region() {
    ::munmap(base_, size_);
    if (owner_ && !path_.empty()) ::unlink(path_.c_str());
  }
  Region(const Region&) = delete;
  Region& operator=(const Region&) = delete;

  RegionHeader* header() const { return static_cast<RegionHeader*>(base_); }
  Slot* slots() const { return reinterpret_cast<Slot*>(at(header()->slots_offset)); }
  SlotId* ids() const { return reinterpret_cast<SlotId*>(at(header()->ids_offset)); }
  // Row `proc` of the process table: one HeldCount per slot.
  HeldCount* held(uint32_t proc) const {
    return reinterpret_cast<HeldCount*>(at(header()->held_offset)) + static_cast<size_t>(proc) * header()->slot_capacity;
  }
  char* blob() const { return reinterpret_cast<char*>(at(header()->blob_offset)); }
  void* index_area() const { return at(header()->index_offset); }
  bool shared() const { return !path_.empty(); }
  bool owner() const { return owner_; }
  const std::string& path() const { return path_; }

 private:
  struct Layout { uint64_t slots, ids, held, blob, index, size; };
  static uint64_t round_up(uint64_t v, uint64_t a) { return (v + a - 1) / a * a; }
  static Layout layout(uint32_t slot_capacity, uint32_t procs, uint64_t index_bytes) {
    Layout l;
    l.slots = round_up(sizeof(RegionHeader), 4096);
    l.ids = round_up(l.slots + uint64_t{slot_capacity} * sizeof(Slot), 4096);
    l.held = round_up(l.ids + uint64_t{slot_capacity} * sizeof(SlotId), 4096);
    l.blob = round_up(l.held + uint64_t{procs} * slot_capacity * sizeof(HeldCount), 4096);
    l.index = round_up(l.blob + kBlobCapacity, 4096);
    l.size = round_up(l.index + index_bytes, 4096);
    return l;
  }
  Region(void* base, size_t size, std::string path, bool owner) : base_(base), size_(size), path_(std::move(path)), owner_(owner) {}
  char* at(uint64_t off) const { return static_cast<char*>(base_) + off; }

  void* base_;
  size_t size_;
  std::string path_;
  bool owner_;
};

}  // namespace pr
