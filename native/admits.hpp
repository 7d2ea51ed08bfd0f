// Containment of a regular language in the live strings of an automaton: the check behind
// vocabulary slices. Reference: constrain.engine.slices.admits.
#pragma once

#include <cstdint>
#include <vector>

#include "trie.hpp"

namespace constrain {

// A set of (language state, automaton state) pairs (non-negative): open addressing over one
// array, since the product searches insert a few hundred pairs each and never erase.
class PairSet {
public:
    explicit PairSet(int32_t r, int32_t q) { insert(r, q); }
    bool insert(int32_t r, int32_t q) {
        if ((size_ + 1) * 2 > slots_.size()) grow();
        return place((uint64_t(uint32_t(r)) << 32) | uint32_t(q));
    }
    size_t size() const { return size_; }

private:
    static constexpr uint64_t kEmpty = ~uint64_t(0);
    bool place(uint64_t key) {
        const size_t mask = slots_.size() - 1;
        uint64_t h = key * 0x9E3779B97F4A7C15ULL;
        for (size_t i = size_t(h >> 32) & mask;; i = (i + 1) & mask) {
            if (slots_[i] == key) return false;
            if (slots_[i] == kEmpty) {
                slots_[i] = key;
                ++size_;
                return true;
            }
        }
    }
    void grow() {
        std::vector<uint64_t> old(slots_.empty() ? 64 : slots_.size() * 2, kEmpty);
        old.swap(slots_);
        size_ = 0;
        for (uint64_t key : old)
            if (key != kEmpty) place(key);
    }
    std::vector<uint64_t> slots_;
    size_t size_ = 0;
};

// The 256 bytes, for a search that reads every byte.
inline const std::vector<uint8_t>& every_byte() {
    static const std::vector<uint8_t> bytes = [] {
        std::vector<uint8_t> all(256);
        for (int b = 0; b < 256; ++b) all[size_t(b)] = uint8_t(b);
        return all;
    }();
    return bytes;
}

// Whether every string of `language` (and each prefix), read from `state`, keeps the
// automaton whose transitions `next(q, b)` give (0 = dead) in a live state: a search of the
// product's reachable pairs, refusing at the first pair where the language reads a byte the
// automaton cannot, and past `max_pairs` pairs (0: no limit) with "not shown" (false).
// `bytes` stands for all 256 when neither `next` nor the language tells apart the bytes it
// leaves out from one it holds (MaskFiller::representatives).
template <typename Next>
bool admits(Next&& next, int32_t state, const DFATable& language, int32_t language_start,
            size_t max_pairs = 0, const std::vector<uint8_t>& bytes = every_byte()) {
    PairSet seen(language_start, state);
    std::vector<std::pair<int32_t, int32_t>> stack{{language_start, state}};
    while (!stack.empty()) {
        auto [r, q] = stack.back();
        stack.pop_back();
        for (uint8_t b : bytes) {
            int32_t r2 = language.at(r, b);
            if (!r2) continue;
            int32_t q2 = next(q, b);
            if (!q2) return false;
            if (seen.insert(r2, q2)) stack.emplace_back(r2, q2);
            if (max_pairs && seen.size() > max_pairs) return false;
        }
    }
    return true;
}

}  // namespace constrain
