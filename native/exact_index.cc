#include "exact_index.h"

#include <algorithm>
#include <cstring>

#include "hot_pages.h"
#include "prefix_index.h"

namespace pr {

namespace {

// How well a tier serves a block, for the split of a lead: a GPU block is reused as is, a
// pending one will be by the time the request runs, an offloaded one must be loaded back.
uint8_t rank(ExactTier t) { return t == ExactTier::Gpu ? 3 : t == ExactTier::Pending ? 2 : 1; }

// Bytes malloc gives a request of n bytes (glibc: 8 bytes of header, 16-byte multiples, at
// least 32): what a node of a std container really costs.
size_t chunk(size_t n) { return std::max<size_t>(32, (n + 8 + 15) / 16 * 16); }

}  // namespace

size_t exact_hashes(const uint32_t* tokens, size_t ntokens, uint32_t block_size, uint64_t seed, uint64_t* out) {
  if (block_size == 0) return 0;
  const size_t bytes = ntokens / block_size * block_size * 4;
#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ == __ORDER_BIG_ENDIAN__
  // The hash is over little-endian ids: a big-endian host swaps them into a copy.
  thread_local std::vector<uint32_t> le;
  le.resize(bytes / 4);
  for (size_t i = 0; i < le.size(); i++) le[i] = __builtin_bswap32(tokens[i]);
  return chain_hashes(reinterpret_cast<const uint8_t*>(le.data()), bytes, size_t{block_size} * 4, seed, out);
#else
  return chain_hashes(reinterpret_cast<const uint8_t*>(tokens), bytes, size_t{block_size} * 4, seed, out);
#endif
}

ExactIndex::View& ExactIndex::view(uint32_t slot) {
  auto& v = views_[slot];
  if (!v) v = std::make_unique<View>();
  return *v;
}

void ExactIndex::add_ref(uint64_t r, uint32_t slot, ExactTier tier) {
  if (tier != ExactTier::Pending) drop_pending(r, slot, -1);
  auto& hs = table_[r];
  for (Holder& h : hs)
    if (h.slot == slot && h.tier == tier) {
      h.refs++;
      return;
    }
  const size_t before = hs.capacity();
  hs.push_back(Holder{slot, tier, 1, 0});
  track_capacity(before, hs.capacity());
}

void ExactIndex::drop_ref(uint64_t r, uint32_t slot, ExactTier tier) {
  auto it = table_.find(r);
  if (it == table_.end()) return;
  auto& hs = it->second;
  for (size_t i = 0; i < hs.size(); i++) {
    if (hs[i].slot != slot || hs[i].tier != tier) continue;
    if (--hs[i].refs == 0) {
      hs[i] = hs.back();
      hs.pop_back();
    }
    break;
  }
  if (hs.empty()) {
    holder_slots_ -= hs.capacity();
    table_.erase(it);
  }
}

bool ExactIndex::drop_pending(uint64_t r, uint32_t slot, double at) {
  auto it = table_.find(r);
  if (it == table_.end()) return false;
  auto& hs = it->second;
  for (size_t i = 0; i < hs.size(); i++) {
    if (hs[i].slot != slot || hs[i].tier != ExactTier::Pending || (at >= 0 && hs[i].expiry != at)) continue;
    hs[i] = hs.back();
    hs.pop_back();
    if (hs.empty()) {
      holder_slots_ -= hs.capacity();
      table_.erase(it);
    }
    entries_--;
    pending_--;
    views_[slot]->pending--;
    return true;
  }
  return false;
}

void ExactIndex::purge(double now) {
  last_now_ = std::max(last_now_, now);
  // Expiries are in creation order, which is expiry order while `now` moves forward and
  // pending_ms stays put; an entry out of order waits for those before it (match() ignores it
  // once expired all the same).
  while (!expiries_.empty() && expiries_.front().at <= now) {
    const Expiry e = expiries_.front();
    expiries_.pop_front();
    drop_pending(e.hash, e.slot, e.at);
  }
  // Entries turned real (or cleared) leave their record behind: drop them when they are most.
  if (expiries_.size() > 2 * pending_ + 1024) {
    std::deque<Expiry> keep;
    for (const Expiry& e : expiries_) {
      auto it = table_.find(e.hash);
      if (it == table_.end()) continue;
      for (const Holder& h : it->second)
        if (h.slot == e.slot && h.tier == ExactTier::Pending && h.expiry == e.at) {
          keep.push_back(e);
          break;
        }
    }
    expiries_.swap(keep);
  }
}

bool ExactIndex::evict_pending() {
  while (!expiries_.empty()) {
    const Expiry e = expiries_.front();
    expiries_.pop_front();
    if (drop_pending(e.hash, e.slot, e.at)) return true;
  }
  return false;
}

int64_t ExactIndex::store(uint32_t slot, const uint64_t* parent, const uint64_t* engine, size_t n, const uint32_t* tokens,
                          uint32_t block_size, uint64_t seed, ExactTier tier, size_t capacity) {
  if (slot >= views_.size() || tier == ExactTier::Pending || block_size == 0) return 0;
  View& v = view(slot);
  const int t = static_cast<int>(tier);
  if (parent != nullptr) {
    // The parent may have been reported in the other tier (an offloaded copy's parent still
    // on the GPU, or the reverse).
    auto it = v.engine[t].find(*parent);
    if (it == v.engine[t].end()) {
      it = v.engine[1 - t].find(*parent);
      if (it == v.engine[1 - t].end()) {
        orphans_++;
        return kOrphan;
      }
    }
    seed = it->second;
  }
  if (scratch_.size() < n) scratch_.resize(n);
  const size_t hashed = exact_hashes(tokens, n * block_size, block_size, seed, scratch_.data());
  int64_t recorded = 0;
  bool dropped = false;
  auto& map = v.engine[t];
  for (size_t i = 0; i < hashed; i++) {
    const uint64_t r = scratch_[i];
    auto [it, inserted] = map.try_emplace(engine[i], r);
    if (!inserted) {
      // Stored again: with the same tokens nothing changes; with others (the engine reused
      // the hash) the entry follows the latest report.
      if (it->second != r) {
        drop_ref(it->second, slot, tier);
        it->second = r;
        add_ref(r, slot, tier);
      }
      recorded++;
      continue;
    }
    // The block may turn one of this slot's own pending entries real: no room needed then.
    const bool replaces = drop_pending(r, slot, -1);
    if (!replaces && entries_ >= capacity && !evict_pending()) {
      map.erase(it);
      dropped_++;
      dropped = true;
      continue;
    }
    entries_++;
    add_ref(r, slot, tier);
    recorded++;
  }
  return dropped ? kCapacity : recorded;
}

size_t ExactIndex::remove(uint32_t slot, const uint64_t* engine, size_t n, ExactTier tier) {
  if (slot >= views_.size() || !views_[slot] || tier == ExactTier::Pending) return 0;
  auto& map = views_[slot]->engine[static_cast<int>(tier)];
  size_t removed = 0;
  for (size_t i = 0; i < n; i++) {
    auto it = map.find(engine[i]);
    if (it == map.end()) continue;
    drop_ref(it->second, slot, tier);
    map.erase(it);
    entries_--;
    removed++;
  }
  return removed;
}

void ExactIndex::empty_slot(uint32_t slot) {
  View& v = *views_[slot];
  for (int t = 0; t < 2; t++) {
    for (const auto& [engine, r] : v.engine[t]) drop_ref(r, slot, static_cast<ExactTier>(t));
    entries_ -= v.engine[t].size();
    std::unordered_map<uint64_t, uint64_t>().swap(v.engine[t]);  // gives the buckets back too
  }
  if (v.pending > 0)
    for (const Expiry& e : expiries_)
      if (e.slot == slot) drop_pending(e.hash, slot, -1);
}

void ExactIndex::clear(uint32_t slot) {
  if (slot < views_.size() && views_[slot]) empty_slot(slot);
}

void ExactIndex::set_view(uint32_t slot, ExactView next) {
  if (slot >= views_.size()) return;
  View& v = view(slot);
  if (v.view == ExactView::Fresh) fresh_views_--;
  if (next == ExactView::Fresh) fresh_views_++;
  v.view = next;
  if (next == ExactView::None) empty_slot(slot);
}

void ExactIndex::forget(uint32_t slot) {
  if (slot >= views_.size() || !views_[slot]) return;
  set_view(slot, ExactView::None);
  views_[slot].reset();
}

PR_HOT void ExactIndex::match(const uint64_t* hashes, size_t n, double now, ExactMatch& out) {
  purge(now);
  for (size_t i = 0; i < n; i++) {
    auto it = table_.find(hashes[i]);
    if (it == table_.end()) return;
    bool advanced = false;
    for (const Holder& h : it->second) {
      if (h.tier == ExactTier::Pending && h.expiry <= now) continue;
      ExactLead& l = out.by_slot[h.slot];
      const uint8_t r = rank(h.tier);
      auto count = [&](uint8_t k) -> uint32_t& { return k == 3 ? l.gpu : k == 2 ? l.pending : l.offloaded; };
      if (l.lead == i) {
        // Chained hashes: block i held means the prefix up to it is the same, but the engine
        // may have evicted an earlier block, so the run must be contiguous from block 0.
        if (i == 0) out.touched.push_back(h.slot);
        l.lead = static_cast<uint32_t>(i + 1);
        l.best = r;
        count(r)++;
        advanced = true;
      } else if (l.lead == i + 1 && r > l.best) {
        count(l.best)--;
        count(r)++;
        l.best = r;
      }
    }
    if (!advanced) return;
  }
}

void ExactIndex::add_pending(uint32_t slot, const uint64_t* hashes, size_t n, double now, double pending_ms, size_t capacity) {
  if (slot >= views_.size() || pending_ms <= 0) return;
  purge(now);
  View& v = view(slot);
  const double at = now + pending_ms;
  for (size_t i = 0; i < n; i++) {
    auto it = table_.find(hashes[i]);
    bool held = false;
    if (it != table_.end())
      for (const Holder& h : it->second)
        if (h.slot == slot && (h.tier != ExactTier::Pending || h.expiry > now)) {
          held = true;
          break;
        }
    if (held) continue;
    if (entries_ >= capacity) {
      // Guesses never push out what the engine reported.
      dropped_ += n - i;
      return;
    }
    auto& hs = it != table_.end() ? it->second : table_[hashes[i]];
    const size_t before = hs.capacity();
    hs.push_back(Holder{slot, ExactTier::Pending, 1, at});
    track_capacity(before, hs.capacity());
    expiries_.push_back(Expiry{at, slot, hashes[i]});
    entries_++;
    pending_++;
    v.pending++;
  }
}

ExactSlotInfo ExactIndex::info(uint32_t slot) {
  ExactSlotInfo out;
  if (slot >= views_.size() || !views_[slot]) return out;
  purge(last_now_);
  const View& v = *views_[slot];
  out.view = v.view;
  out.gpu = v.engine[0].size();
  out.offloaded = v.engine[1].size();
  out.pending = v.pending;
  return out;
}

ExactStats ExactIndex::stats() const {
  ExactStats s;
  s.entries = entries_;
  s.dropped = dropped_;
  s.orphans = orphans_;
  // Bucket arrays (one pointer each) plus nodes (a next pointer and the value), as allocated.
  size_t bytes = views_.capacity() * sizeof(views_[0]);
  bytes += table_.bucket_count() * sizeof(void*) + table_.size() * chunk(sizeof(void*) + sizeof(std::pair<const uint64_t, std::vector<Holder>>));
  bytes += table_.size() * 16 + holder_slots_ * sizeof(Holder);  // each vector's own allocation, with malloc's header
  for (const auto& v : views_) {
    if (!v) continue;
    bytes += chunk(sizeof(View));
    for (const auto& m : v->engine)
      bytes += m.bucket_count() * sizeof(void*) + m.size() * chunk(sizeof(void*) + sizeof(std::pair<const uint64_t, uint64_t>));
  }
  bytes += expiries_.size() * sizeof(Expiry);
  s.memory_bytes = bytes;
  return s;
}

}  // namespace pr
