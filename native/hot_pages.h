// What every pick touches, kept on few pages. Between two picks a proxy handles a whole
// request, which evicts the caches and the TLB: each 4 KiB page a pick touches, of code or
// data, is then a page walk, and under virtualisation a walk costs as much as the rest of the
// lookup.
//
// Code: functions on the pick's path are marked PR_HOT, which the compiler emits to
// .text.hot and the linker places together, rather than spread across the binary in the
// order of their source files.
//
// Data: memory for the tables every pick reads (the ring's points, owners and buckets): one mapping,
// aligned to 2 MiB and advised for transparent huge pages, so a pick's lookups share one TLB
// entry. Where huge pages are unavailable the mapping is ordinary pages, still contiguous.
#pragma once
#include <sys/mman.h>

#include <cstddef>
#include <cstdint>
#include <cstdlib>

#if defined(__GNUC__)
#define PR_HOT __attribute__((hot))
#else
#define PR_HOT
#endif

namespace pr {

class HotPages {
 public:
  static constexpr size_t kHuge = size_t{2} << 20;
  static constexpr size_t kAdviseFrom = size_t{64} << 10;

  HotPages() = default;
  explicit HotPages(size_t bytes) {
    if (bytes == 0) return;
    size_ = (bytes + kHuge - 1) / kHuge * kHuge;
    // Over-map by one huge page and trim, so the start is 2 MiB aligned.
    void* raw = ::mmap(nullptr, size_ + kHuge, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (raw == MAP_FAILED) std::abort();  // a few MiB of address space: nothing sensible to do without it
    const uintptr_t start = reinterpret_cast<uintptr_t>(raw);
    const uintptr_t aligned = (start + kHuge - 1) & ~(kHuge - 1);
    if (aligned > start) ::munmap(raw, aligned - start);
    const uintptr_t end = start + size_ + kHuge;
    if (end > aligned + size_) ::munmap(reinterpret_cast<void*>(aligned + size_), end - (aligned + size_));
    base_ = reinterpret_cast<char*>(aligned);
#ifdef MADV_HUGEPAGE
    // A huge page is committed whole: tables under kAdviseFrom stay on 4 KiB pages (few of
    // them) rather than take 2 MiB each. Above it, a router's ring costs up to 2 MiB more
    // resident memory than it uses, for one TLB entry per lookup.
    if (bytes >= kAdviseFrom) ::madvise(base_, size_, MADV_HUGEPAGE);
#endif
  }
  ~HotPages() {
    if (base_ != nullptr) ::munmap(base_, size_);
  }
  HotPages(const HotPages&) = delete;
  HotPages& operator=(const HotPages&) = delete;
  HotPages(HotPages&& o) noexcept : base_(o.base_), size_(o.size_) { o.base_ = nullptr; o.size_ = 0; }
  HotPages& operator=(HotPages&& o) noexcept {
    if (this != &o) {
      if (base_ != nullptr) ::munmap(base_, size_);
      base_ = o.base_;
      size_ = o.size_;
      o.base_ = nullptr;
      o.size_ = 0;
    }
    return *this;
  }

  char* data() const { return base_; }
  size_t size() const { return size_; }

 private:
  char* base_ = nullptr;
  size_t size_ = 0;
};

}  // namespace pr
