#include <algorithm>
#include <stdexcept>
#include <string>

#include "counted.hpp"

namespace constrain {

namespace {
constexpr int kQuote = 0x22;
constexpr int32_t kOutside = -1;  // the character state of a string not yet opened, or closed
}  // namespace

int64_t CompletionLengths::next_length(int32_t boundary, int64_t at_least) {
    auto found = of_.find(boundary);
    if (found == of_.end()) {
        std::vector<int64_t> mine;
        for (int64_t l = 0; l < window; ++l)
            if (lengths[size_t(l * n_boundaries + boundary)]) mine.push_back(l);
        of_bytes_ += vector_bytes(mine);
        found = of_.emplace(boundary, std::move(mine)).first;
    }
    const std::vector<int64_t>& mine = found->second;
    if (at_least < window) {
        auto it = std::lower_bound(mine.begin(), mine.end(), at_least);
        if (it != mine.end()) return *it;
    }
    if (!period) return -1;
    auto cycle = std::lower_bound(mine.begin(), mine.end(), first);  // one period's lengths
    if (cycle == mine.end()) return -1;
    int64_t from = std::max(at_least, window) - first;
    int64_t turns = from / period, offset = from % period;
    auto it = std::lower_bound(cycle, mine.end(), first + offset);
    if (it == mine.end()) {
        ++turns;
        it = cycle;
    }
    return first + turns * period + (*it - first);
}

bool CompletionLengths::fits(int32_t state, int64_t read, int64_t low, int64_t high) {
    if (state < 0 || size_t(state) >= index.size() || index[size_t(state)] < 0)
        throw std::logic_error("counted: state " + std::to_string(state) + " is no boundary");
    int32_t boundary = index[size_t(state)];
    int64_t found = next_length(boundary, std::max<int64_t>(0, low - read));
    return found >= 0 && (high < 0 || read + found <= high);
}

CountedStrings::CountedStrings(ByteWalk strings, ByteWalk chr, int64_t low, int64_t high,
                               CompletionLengths lengths, std::vector<uint8_t> byte_of_class,
                               int quote_class)
    : strings_(std::move(strings)),
      chr_(std::move(chr)),
      low_(low),
      high_(high),
      lengths_(std::move(lengths)),
      byte_of_class_(std::move(byte_of_class)),
      quote_class_(quote_class) {
    keys_.push_back({0, kOutside, 0});
    rows_.emplace_back(byte_of_class_.size(), 0);  // the dead state's row
    rows_bytes_ += vector_bytes(rows_.back());
    Key start{strings_.start, kOutside, 0};
    if (strings_.start && closes_somewhere(start)) start_ = id(start);
}

int32_t CountedStrings::id(const Key& key) {
    auto found = ids_.find(key);
    if (found != ids_.end()) return found->second;
    auto state = int32_t(keys_.size());
    ids_.emplace(key, state);
    keys_.push_back(key);
    rows_.emplace_back();
    return state;
}

size_t CountedStrings::heap_bytes() const {
    return strings_.heap_bytes() + chr_.heap_bytes() + lengths_.heap_bytes() +
           vector_bytes(byte_of_class_) + vector_bytes(keys_) + tree_bytes(ids_) +
           vector_bytes(rows_) + rows_bytes_ + tree_bytes(ends_) + ends_bytes_;
}

bool CountedStrings::accepts(int32_t state) const {
    const Key& key = keys_[size_t(state)];
    return state && key.inner == kOutside && strings_.accepts(key.at);
}

int32_t CountedStrings::next(int32_t state, int own) {
    if (rows_[size_t(state)].empty()) compute(state);
    return rows_[size_t(state)][size_t(own)];
}

void CountedStrings::compute(int32_t state) {
    const Key key = keys_[size_t(state)];  // a copy: interning below may reallocate
    std::vector<int32_t> row(byte_of_class_.size(), 0);
    std::map<std::pair<int32_t, int32_t>, int32_t> targets;  // (strings, char) -> state
    for (size_t c = 0; c < byte_of_class_.size(); ++c) {
        int b = byte_of_class_[c];
        int32_t after = strings_.next(key.at, b);
        if (!after) continue;
        if (key.inner == kOutside) {  // the opening quote (a closed string reads nothing)
            if (int(c) != quote_class_) continue;
            Key opened{after, chr_.start, key.read};
            auto known = ids_.find(opened);
            if (known != ids_.end())
                row[c] = known->second;
            else if (closes_somewhere(opened))
                row[c] = id(opened);
            continue;
        }
        if (int(c) == quote_class_ && key.inner == chr_.start) {  // the closing quote
            if (low_ <= key.read && (high_ < 0 || key.read <= high_))
                row[c] = id({after, kOutside, key.read});
            continue;
        }
        int32_t inner = chr_.next(key.inner, b);
        if (!inner) continue;
        auto pair = std::make_pair(after, inner);
        auto known = targets.find(pair);
        row[c] = known != targets.end() ? known->second
                                        : (targets[pair] = enter(after, inner, key.read));
    }
    rows_bytes_ += vector_bytes(row);
    rows_[size_t(state)] = std::move(row);
}

int32_t CountedStrings::enter(int32_t at, int32_t inner, int64_t read) {
    Key key{at, inner, read};
    if (chr_.accepts(inner)) {  // a whole character (past `low`, unbounded: no count)
        bool counted = high_ >= 0 || read < low_;
        key = {at, chr_.start, counted ? read + 1 : read};
    }
    auto found = ids_.find(key);
    if (found != ids_.end()) return found->second;
    return closes_somewhere(key) ? id(key) : 0;
}

bool CountedStrings::closes_somewhere(const Key& key) {
    if (key.inner == kOutside) {  // before the opening quote
        int32_t inside = strings_.next(key.at, kQuote);
        return inside && closes_somewhere({inside, chr_.start, key.read});
    }
    if (high_ >= 0 && key.read > high_) return false;
    if (key.inner == chr_.start) return lengths_.fits(key.at, key.read, low_, high_);
    for (int32_t end : ends_of(key.at, key.inner))
        if (lengths_.fits(end, key.read + 1, low_, high_)) return true;
    return false;
}

const std::vector<int32_t>& CountedStrings::ends_of(int32_t at, int32_t inner) {
    auto found = ends_.find({at, inner});
    if (found != ends_.end()) return found->second;
    std::vector<int32_t> ends;
    for (uint8_t b : byte_of_class_) {
        int32_t target = strings_.next(at, b);
        if (!target) continue;
        int32_t further = chr_.next(inner, b);
        if (!further) continue;
        if (chr_.accepts(further)) {
            ends.push_back(target);
        } else {
            const auto& more = ends_of(target, further);
            ends.insert(ends.end(), more.begin(), more.end());
        }
    }
    std::sort(ends.begin(), ends.end());
    ends.erase(std::unique(ends.begin(), ends.end()), ends.end());
    ends_bytes_ += vector_bytes(ends);
    return ends_[{at, inner}] = std::move(ends);
}

}  // namespace constrain
