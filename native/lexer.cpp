#include "lexer.hpp"

#include <algorithm>
#include <map>

namespace constrain {

Lexer::Lexer(std::array<int32_t, 256> classes, int n_joint, std::vector<LexemeDFA> lexemes,
             size_t max_states)
    : classes_(classes), n_joint_(n_joint), lexemes_(std::move(lexemes)), max_states_(max_states) {
    combos_.emplace_back();  // state 0: dead
    index_.emplace(Combo{}, 0);
    rows_.assign(size_t(n_joint_), 0);
    done_.push_back(1);
    tag_.push_back(0);
    tag_sets_.emplace_back();
    tag_index_.emplace(std::vector<int>{}, 0);
    can_end_.assign(256, 0);  // tag 0 never ends
    std::map<std::vector<uint8_t>, int32_t> column_class;  // the keywords' blocked flags
    for (int b = 0; b < 256; ++b) {
        std::vector<uint8_t> column;
        for (const LexemeDFA& dfa : lexemes_)
            if (!dfa.owners.empty()) column.push_back(dfa.blocked[size_t(b)]);
        end_classes_[size_t(b)] = column_class.emplace(column, int32_t(column_class.size()))
                                      .first->second;
    }
}

int32_t Lexer::start_of(const std::vector<int>& lexemes) {
    auto found = starts_.find(lexemes);
    if (found != starts_.end()) return found->second;
    Combo combo;
    for (int j : lexemes) combo.emplace_back(j, lexemes_.at(size_t(j)).start);
    if (combo.empty()) combo.emplace_back(-1, 0);  // reads nothing, yet is not dead
    int32_t state = intern(combo);
    starts_.emplace(lexemes, state);
    keys_bytes_ += copy_bytes(lexemes);
    return state;
}

size_t Lexer::heap_bytes() const {
    size_t out = vector_bytes(lexemes_);
    for (const LexemeDFA& dfa : lexemes_) out += dfa.heap_bytes();
    return out + vector_bytes(combos_) + hash_bytes(index_) + vector_bytes(rows_) +
           vector_bytes(done_) + vector_bytes(tag_) + vector_bytes(tag_sets_) +
           tree_bytes(tag_index_) + vector_bytes(can_end_) + tree_bytes(starts_) + keys_bytes_;
}

Combo Lexer::key(int32_t state) const {
    Combo out;
    for (const auto& pair : combos_.at(size_t(state)))
        if (pair.first >= 0) out.push_back(pair);
    return out;
}

int32_t Lexer::intern(const Combo& combo) {
    auto found = index_.find(combo);
    if (found != index_.end()) return found->second;
    if (combos_.size() >= max_states_) {
        std::vector<int> ids;
        for (const auto& [j, s] : combo)
            if (j >= 0) ids.push_back(j);
        throw LexerLimit("the lexer exceeds its state budget", ids);
    }
    auto state = int32_t(combos_.size());
    combos_.push_back(combo);
    index_.emplace(combo, state);
    keys_bytes_ += 2 * copy_bytes(combo);
    rows_.resize(rows_.size() + size_t(n_joint_), 0);
    done_.push_back(0);
    tag_.push_back(tag_of(combo));
    return state;
}

void Lexer::compute(int32_t state) {
    const Combo combo = combos_[size_t(state)];  // a copy: interning below may reallocate
    std::vector<int32_t> out(size_t(n_joint_), 0);
    Combo pairs;
    for (int c = 0; c < n_joint_; ++c) {
        pairs.clear();
        for (const auto& [j, s] : combo) {
            if (j < 0) continue;
            LexemeDFA& dfa = lexemes_[size_t(j)];
            int32_t t = dfa.next(s, dfa.own_of_joint[size_t(c)]);
            if (t) pairs.emplace_back(j, t);
        }
        if (!pairs.empty()) out[size_t(c)] = intern(pairs);
    }
    std::copy(out.begin(), out.end(), rows_.begin() + ptrdiff_t(state) * n_joint_);
    done_[size_t(state)] = 1;
}

int32_t Lexer::tag_of(const Combo& combo) {
    std::vector<int> ending;
    for (const auto& [j, s] : combo)
        if (j >= 0 && lexemes_[size_t(j)].accepts(s)) ending.push_back(j);
    if (ending.empty()) return 0;
    int best = lexemes_[size_t(ending[0])].priority;
    for (int j : ending) best = std::max(best, lexemes_[size_t(j)].priority);
    std::vector<int> tags, beaten;
    for (int j : ending)
        if (lexemes_[size_t(j)].priority == best) tags.push_back(j);
    for (int j : tags)  // a keyword wins over the regexes it is a keyword of
        for (int owner : lexemes_[size_t(j)].owners) beaten.push_back(owner);
    std::vector<int> kept;
    for (int j : tags)
        if (std::find(beaten.begin(), beaten.end(), j) == beaten.end()) kept.push_back(j);
    std::sort(kept.begin(), kept.end());
    kept.erase(std::unique(kept.begin(), kept.end()), kept.end());
    auto found = tag_index_.find(kept);
    if (found != tag_index_.end()) return found->second;
    auto tag = int32_t(tag_sets_.size());
    tag_sets_.push_back(kept);
    tag_index_.emplace(kept, tag);
    keys_bytes_ += 2 * copy_bytes(kept);
    std::array<uint8_t, 256> blocked{};
    for (int j : kept) {
        const LexemeDFA& dfa = lexemes_[size_t(j)];
        if (dfa.owners.empty()) continue;
        for (int b = 0; b < 256; ++b) blocked[size_t(b)] |= dfa.blocked[size_t(b)];
    }
    for (int b = 0; b < 256; ++b) can_end_.push_back(blocked[size_t(b)] ? 0 : 1);
    return tag;
}

}  // namespace constrain
