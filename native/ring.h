// Consistent-hash ring: an immutable table of virtual-node points built once per
// membership. Readers share it freely; the router publishes new tables by pointer swap.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "hot_pages.h"

namespace pr {

struct RingMember {
  std::string id;
  double weight;  // > 0; virtual nodes = max(1, round(weight * vnodes_per_weight))
  // Names this instance answers to (models, LoRA adapters); a pick may be limited to one.
  std::vector<std::string> groups = {};
  // longest_prefix: blocks the prefix index remembers for this instance (0: the router's default).
  uint32_t index_blocks = 0;
};

class Ring {
 public:
  // Members are sorted by id inside, so the table does not depend on the order given.
  // Ids must be unique (the TypeScript layer rejects duplicates).
  Ring(std::vector<RingMember> members, uint32_t vnodes_per_weight);

  size_t member_count() const { return members_.size(); }
  size_t point_count() const { return npoints_; }
  const RingMember& member(size_t i) const { return members_[i]; }

  // Position of the first point at or after key, wrapping at the top of the space.
  size_t find(uint64_t key) const;
  size_t next(size_t pos) const { return pos + 1 == npoints_ ? 0 : pos + 1; }
  // Index (into members) of the instance that owns the point at pos.
  uint32_t owner(size_t pos) const { return owners_[pos]; }
  // Precondition for owner/owner_of: the ring has members (point_count() > 0).
  uint32_t owner_of(uint64_t key) const { return owners_[find(key)]; }
  // Index of id among the members, or -1.
  int index_of(const std::string& id) const;
  size_t memory_bytes() const;

  // Point hash of virtual node n of an instance; exposed for tests.
  static uint64_t point_hash(const std::string& id, uint32_t n);

 private:
  std::vector<RingMember> members_;
  // The lookup's tables, together in one mapping (hot_pages.h).
  HotPages pages_;
  size_t table_bytes_ = 0;  // of pages_, which rounds up to whole huge pages
  size_t npoints_ = 0;
  uint64_t* points_ = nullptr;
  uint16_t* owners_ = nullptr;  // member index; routers cap members at 4096
  // buckets_[b] = first position whose point's top `bucket_bits_` bits are >= b, so a
  // lookup is one table read and a short scan instead of a binary search.
  uint32_t* buckets_ = nullptr;
  int bucket_bits_ = 0;
};

}  // namespace pr
