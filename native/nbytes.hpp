// Estimates of the heap bytes containers hold, for the `nbytes` accessors: capacity-based, with
// the per-allocation and per-node overheads of libstdc++ over glibc malloc (close, not exact).
#pragma once

#include <cstddef>
#include <map>
#include <set>
#include <unordered_map>
#include <unordered_set>
#include <vector>

namespace constrain {

constexpr size_t kMallocOverhead = 16;                      // a heap block's header, rounding
constexpr size_t kTreeNodeBytes = 32 + kMallocOverhead;     // a std::map node: colour, 3 links
constexpr size_t kHashNodeBytes = 16 + kMallocOverhead;     // an unordered node: link, hash
constexpr size_t kListNodeBytes = 16 + kMallocOverhead;     // a std::list node: 2 links
constexpr size_t kSharedBlockBytes = 16 + kMallocOverhead;  // make_shared's counts

// A vector's own block (its elements' heap not included).
template <typename T>
size_t vector_bytes(const std::vector<T>& v) {
    return v.capacity() ? v.capacity() * sizeof(T) + kMallocOverhead : 0;
}

// A copy of `v` (as a map key or a stored value): exactly its size.
template <typename T>
size_t copy_bytes(const std::vector<T>& v) {
    return v.empty() ? 0 : v.size() * sizeof(T) + kMallocOverhead;
}

// A tree's nodes (their keys' and values' own heap not included).
template <typename K, typename V, typename C>
size_t tree_bytes(const std::map<K, V, C>& m) {
    return m.size() * (kTreeNodeBytes + sizeof(typename std::map<K, V, C>::value_type));
}

template <typename K, typename C>
size_t tree_bytes(const std::set<K, C>& s) {
    return s.size() * (kTreeNodeBytes + sizeof(K));
}

// A hash table's nodes and buckets (their keys' and values' own heap not included).
template <typename K, typename V, typename H, typename E>
size_t hash_bytes(const std::unordered_map<K, V, H, E>& m) {
    using Entry = typename std::unordered_map<K, V, H, E>::value_type;
    return m.size() * (kHashNodeBytes + sizeof(Entry)) + m.bucket_count() * sizeof(void*);
}

template <typename K, typename H, typename E>
size_t hash_bytes(const std::unordered_set<K, H, E>& s) {
    return s.size() * (kHashNodeBytes + sizeof(K)) + s.bucket_count() * sizeof(void*);
}

}  // namespace constrain
