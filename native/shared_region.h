// The memory a router's state lives in: process-private, or shared memory that several
// processes map MAP_SHARED (a memfd, else a file), so that their picks see each other's
// leases as one process would. Everything in it is plain data at fixed offsets: no pointers, no heap-owned
// members, only lock-free atomics and process-shared robust mutexes.
//
// Writers: the process that created the region is the only one that publishes membership
// and parameters (meta_mutex, version counters); every process takes and releases leases
// on the slots (atomics) and records them in its own HeldCount row, so that the leases of a
// process that died can be released by the creator (RouterState::release_process).
//
// Pages are committed only when touched (anonymous memory, a memfd, or a sparse file), so
// the fixed capacities cost address space, not memory, until used.
#pragma once
#include <dirent.h>
#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <sys/file.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <unistd.h>
#ifdef __linux__
#include <sys/prctl.h>
#include <sys/syscall.h>
#endif

#include <atomic>
#include <cerrno>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <memory>
#include <string>

#include "load.h"
#include "snapshot.h"

namespace pr {

constexpr uint64_t kRegionMagic = 0x32657461'74732d72ULL;  // "r-state2" little-endian (RoutingParams grew)
constexpr uint32_t kLayoutVersion = 3;  // 2: slots carry the engines' reported load; 3: the fleet record
constexpr uint32_t kMaxProcesses = 64;
// The serialised membership (ids, weights, groups, slots, index capacities) of up to 4096
// instances with ids of up to 3 KiB.
constexpr uint64_t kBlobCapacity = uint64_t{16} << 20;
// memfd_create(2) flags, spelled out: older C libraries name none of them.
constexpr unsigned kMfdCloexec = 0x1, kMfdAllowSealing = 0x2, kMfdNoexecSeal = 0x8;

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
  // Bumped (under meta) by every publication of the fleet record (RouterState::set_fleet).
  std::atomic<uint64_t> fleet_version;
  alignas(64) RobustMutex meta;
  RoutingParams params;  // under meta
  uint64_t blob_len;     // under meta: the membership record, at the blob's start
  // Under meta: the fleet record, right after the membership record in the blob: what the
  // embedder publishes about the instances beyond routing (addresses, models, health), so
  // that an attached process reads it from the same memory as the membership.
  uint64_t fleet_len;
  // Leases of any process released by the garbage collector, not by the embedder.
  alignas(64) std::atomic<uint64_t> leases_collected;
  // Process table: the pid owning each HeldCount row, 0 for a free row.
  alignas(64) std::atomic<int32_t> pids[kMaxProcesses];
};

class Region {
 public:
  // Process-private memory. On failure returns null and says why in *err.
  static std::unique_ptr<Region> create_private(uint32_t slot_capacity, uint32_t vnodes, uint32_t index_nodes, uint64_t index_bytes,
                                                std::string* err) {
    const Layout l = layout(slot_capacity, 0, index_bytes);
    void* base = ::mmap(nullptr, l.size, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    if (base == MAP_FAILED) { *err = std::string("cannot map the router state: ") + std::strerror(errno); return nullptr; }
    std::unique_ptr<Region> r(new Region(base, l.size, "", -1, Backing::Private, true));
    r->init(l, slot_capacity, vnodes, 0, index_nodes, index_bytes);
    return r;
  }

  // Memory other processes of this user map too (attach(path())). `anonymous`: shared memory
  // with no name (memfd), when the system has it and other processes may open it through
  // /proc/<pid>/fd: it is accounted to the memory cgroup like the process's own memory, is
  // not bounded by the size of /dev/shm, and goes with the last process that maps it, so a
  // creator that crashes leaves nothing behind. Otherwise a file in `dir`, which must have
  // room for the whole region, so that a page touched later cannot find it full (SIGBUS).
  // Either way, the files in `dir` whose creator has gone are removed first.
  static std::unique_ptr<Region> create_shared(const std::string& dir, bool anonymous, uint32_t slot_capacity, uint32_t vnodes,
                                               uint32_t index_nodes, uint64_t index_bytes, std::string* err) {
    const Layout l = layout(slot_capacity, kMaxProcesses, index_bytes);
    // Files that crashed creators left there (this version's fallback, or an earlier version's
    // only choice) would hold their memory for ever.
    sweep(dir);
    std::string path;
    Backing backing = Backing::Anonymous;
    int fd = anonymous ? anonymous_fd(l.size, &path) : -1;
    if (fd < 0) {
      backing = Backing::File;
      fd = file_fd(dir, l, &path, err);
      if (fd < 0) return nullptr;
    }
    void* base = ::mmap(nullptr, l.size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    if (base == MAP_FAILED) {
      *err = std::string("cannot map the router state: ") + std::strerror(errno);
      if (backing == Backing::File) ::unlink(path.c_str());
      ::close(fd);
      return nullptr;
    }
    // The descriptor stays open: it is what /proc/<pid>/fd names, or what holds the file's lock.
    std::unique_ptr<Region> r(new Region(base, l.size, path, fd, backing, true));
    r->init(l, slot_capacity, vnodes, kMaxProcesses, index_nodes, index_bytes);
    return r;
  }

  static std::unique_ptr<Region> attach(const std::string& path, std::string* err) {
    const int fd = ::open(path.c_str(), O_RDWR | O_CLOEXEC);
    if (fd < 0) {
      const int e = errno;
      *err = "cannot open '" + path + "': " + std::strerror(e);
      if (e == ENOENT && path.compare(0, 6, "/proc/") == 0) *err += " (the process that created it has exited or closed it)";
      return nullptr;
    }
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
    std::unique_ptr<Region> r(new Region(base, size, path, -1, Backing::Attached, false));
    const RegionHeader* h = r->header();
    if (h->magic.load(std::memory_order_acquire) != kRegionMagic) {
      *err = "'" + path + "' is not a router state file";
      return nullptr;
    }
    // pids[] has kMaxProcesses rows whatever the header says: a larger count would have
    // claim_row and release_process index past it.
    if (h->processes > kMaxProcesses) {
      *err = "'" + path + "' has an inconsistent header: a process table of " + std::to_string(h->processes) + " rows, at most " +
             std::to_string(kMaxProcesses);
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
    // Unlinked before the lock goes with the descriptor: a sweep never sees it unlocked.
    if (owner_ && backing_ == Backing::File) ::unlink(path_.c_str());
    if (fd_ >= 0) ::close(fd_);
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
  bool shared() const { return backing_ != Backing::Private; }
  bool owner() const { return owner_; }
  // What attach() opens: /proc/<pid>/fd/<fd> for anonymous memory, else the file; empty when private.
  const std::string& path() const { return path_; }

  // Files a creator in `dir` leaves begin with this, then its pid.
  static constexpr const char* kFilePrefix = "prefix-router-state-";

 private:
  enum class Backing { Private, Anonymous, File, Attached };
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
  static std::string mib(uint64_t bytes) { return std::to_string((bytes + (uint64_t{1} << 20) - 1) >> 20) + " MiB"; }

  // A sealed memfd of `size` bytes, and in *path the name other processes open it by; -1 when
  // the system has none, or when they could not open it.
  static int anonymous_fd(uint64_t size, std::string* path) {
#if defined(__linux__) && defined(SYS_memfd_create) && defined(F_ADD_SEALS)
    // A process that is not dumpable (started with file capabilities, say) has a /proc/<pid>/fd
    // that other processes of its user may not open.
    if (::prctl(PR_GET_DUMPABLE) != 1) return -1;
    // Where vm.memfd_noexec asks for it, a memfd must be created without exec; kernels before
    // 6.3 do not know the flag.
    int fd = static_cast<int>(::syscall(SYS_memfd_create, "prefix-router-state", kMfdCloexec | kMfdAllowSealing | kMfdNoexecSeal));
    if (fd < 0 && errno == EINVAL) fd = static_cast<int>(::syscall(SYS_memfd_create, "prefix-router-state", kMfdCloexec | kMfdAllowSealing));
    if (fd < 0) return -1;
    // Sealed at its size: a process that opens it cannot shrink it under the others' mappings.
    if (::ftruncate(fd, static_cast<off_t>(size)) != 0 || ::fcntl(fd, F_ADD_SEALS, F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_SEAL) != 0) {
      ::close(fd);
      return -1;
    }
    *path = "/proc/" + std::to_string(::getpid()) + "/fd/" + std::to_string(fd);
    const int probe = ::open(path->c_str(), O_RDWR | O_CLOEXEC);  // no /proc mounted, say
    if (probe < 0) {
      ::close(fd);
      return -1;
    }
    ::close(probe);
    return fd;
#else
    (void)size;
    (void)path;
    return -1;
#endif
  }

  // A new file in dir, locked for as long as this process holds it, with room for the region.
  static int file_fd(const std::string& dir, const Layout& l, std::string* path, std::string* err) {
    struct statvfs vfs;
    if (::statvfs(dir.c_str(), &vfs) != 0) { *err = "cannot keep the router state in '" + dir + "': " + std::strerror(errno); return -1; }
    const uint64_t free_bytes = uint64_t{vfs.f_bavail} * vfs.f_frsize;
    // A file system reporting no blocks at all has no limit to tell (tmpfs mounted size=0).
    if (vfs.f_blocks != 0 && free_bytes < l.size) {
      *err = "cannot keep the router state in '" + dir + "': it needs " + mib(l.size) + " there and '" + dir + "' has " + mib(free_bytes) +
             " free (a container's /dev/shm is 64 MiB unless it is given more, e.g. docker run --shm-size)";
      return -1;
    }
    static std::atomic<uint32_t> made{0};
    for (int attempt = 0; attempt < 16; attempt++) {
      struct timespec now;
      ::clock_gettime(CLOCK_REALTIME, &now);
      *path = dir + "/" + kFilePrefix + std::to_string(::getpid()) + "-" + std::to_string(++made) + "-" + std::to_string(now.tv_nsec);
      const int fd = ::open(path->c_str(), O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
      if (fd < 0 && errno == EEXIST) continue;
      if (fd < 0) { *err = "cannot create '" + *path + "': " + std::strerror(errno); return -1; }
      // Another process's sweep may have taken the file between open and lock: then a new name.
      struct stat mine, named;
      if (::flock(fd, LOCK_EX) != 0 || ::fstat(fd, &mine) != 0 || ::stat(path->c_str(), &named) != 0 || mine.st_ino != named.st_ino ||
          mine.st_dev != named.st_dev) {
        ::close(fd);
        continue;
      }
      if (::ftruncate(fd, static_cast<off_t>(l.size)) != 0) {
        *err = "cannot size '" + *path + "': " + std::strerror(errno);
        ::unlink(path->c_str());
        ::close(fd);
        return -1;
      }
#ifdef __linux__
      // Every pick touches the header and the counters: those pages are taken now, while the
      // directory has room for them.
      const int e = ::posix_fallocate(fd, 0, static_cast<off_t>(l.ids));
      if (e != 0 && e != EOPNOTSUPP) {
        *err = "cannot reserve " + mib(l.ids) + " for the router state in '" + dir + "': " + std::strerror(e);
        ::unlink(path->c_str());
        ::close(fd);
        return -1;
      }
#endif
      return fd;
    }
    *err = "cannot create a router state file in '" + dir + "': every name tried was taken";
    return -1;
  }

  // Removes the files in dir whose creator is gone: nobody holds their lock, and the pid in the
  // name is no process, or this one (a container's restarted process often has the pid the
  // crashed one had). A file whose lock is free but whose pid lives is kept: a creator between
  // open and lock, or one from a version that did not lock.
  static void sweep(const std::string& dir) {
    DIR* d = ::opendir(dir.c_str());
    if (d == nullptr) return;
    const size_t prefix_len = std::strlen(kFilePrefix);
    while (const dirent* e = ::readdir(d)) {
      if (std::strncmp(e->d_name, kFilePrefix, prefix_len) != 0) continue;
      const long pid = std::strtol(e->d_name + prefix_len, nullptr, 10);
      if (pid <= 0) continue;
      if (pid != ::getpid() && !(::kill(static_cast<pid_t>(pid), 0) != 0 && errno == ESRCH)) continue;
      const std::string path = dir + "/" + e->d_name;
      const int fd = ::open(path.c_str(), O_RDWR | O_CLOEXEC | O_NOFOLLOW | O_NONBLOCK);
      if (fd < 0) continue;  // another user's, say
      struct stat locked, named;
      if (::flock(fd, LOCK_EX | LOCK_NB) == 0 && ::fstat(fd, &locked) == 0 && S_ISREG(locked.st_mode) && locked.st_uid == ::geteuid() &&
          ::stat(path.c_str(), &named) == 0 && named.st_ino == locked.st_ino && named.st_dev == locked.st_dev)
        ::unlink(path.c_str());
      ::close(fd);
    }
    ::closedir(d);
  }

  void init(const Layout& l, uint32_t slot_capacity, uint32_t vnodes, uint32_t procs, uint32_t index_nodes, uint64_t index_bytes) {
    // Fresh pages are zero, which is every counter's initial value: only the header is set.
    RegionHeader* h = header();
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
  }

  Region(void* base, size_t size, std::string path, int fd, Backing backing, bool owner)
      : base_(base), size_(size), path_(std::move(path)), fd_(fd), backing_(backing), owner_(owner) {}
  char* at(uint64_t off) const { return static_cast<char*>(base_) + off; }

  void* base_;
  size_t size_;
  std::string path_;
  int fd_;  // the creator's memfd or locked file; -1 otherwise
  Backing backing_;
  bool owner_;
};

}  // namespace pr
