#include "masks.hpp"

#include <algorithm>
#include <atomic>
#include <functional>
#include <mutex>
#include <thread>
#include <stdexcept>

namespace constrain {

namespace {

void set_bit(uint32_t* row, int64_t token) { row[token >> 5] |= uint32_t(1) << (token & 31); }

constexpr size_t kAcrossPairs = 1024;  // pairs a slice check across lexemes may visit
constexpr size_t kAcrossKept = 4096;   // (node, state) answers kept
constexpr size_t kTextLevelStates = 64;  // lexer states per level a text length search holds

}  // namespace

void Slices::validate_and_index() {
    auto require = [](bool ok, const char* what) {
        if (!ok) throw std::invalid_argument(what);
    };
    const size_t n = languages.size();
    require(n <= 16, "at most 16 slices");
    require(starts.size() == n && infinite.size() == n && bitmasks.size() == n &&
                within.size() == n,
            "every slice needs a language, a start, a length flag, a bitmask and its holders");
    for (size_t i = 0; i < n; ++i) {
        require(starts[i] >= 0 && starts[i] < languages[i].n_states, "slice start out of range");
        require(bitmasks[i].size() == n_words, "a slice bitmask has the vocabulary's words");
        for (int j : within[i]) require(j >= 0 && size_t(j) < n, "a slice holder out of range");
    }
    language_classes_.assign(n * 256, 0);
    for (size_t i = 0; i < n; ++i) {  // bytes whose columns are alike share a class
        const DFATable& language = languages[i];
        std::map<std::vector<int32_t>, int32_t> column_class;
        std::vector<int32_t> merged(size_t(language.n_classes));
        for (int32_t c = 0; c < language.n_classes; ++c) {
            std::vector<int32_t> column(size_t(language.n_states));
            for (size_t r = 0; r < column.size(); ++r)
                column[r] = language.next[r * size_t(language.n_classes) + size_t(c)];
            merged[size_t(c)] =
                column_class.emplace(std::move(column), int32_t(column_class.size())).first->second;
        }
        for (int b = 0; b < 256; ++b)
            language_classes_[i * 256 + size_t(b)] = merged[language.classes[size_t(b)]];
    }
    require(trie != nullptr, "the vocabulary's trie is required");
    for (int64_t t : trie->tokens)
        require(t < int64_t(n_words) * 32, "a trie token is outside the vocabulary");
    token_bits_.assign(n_words * 32, SliceFilter::kNoSlice);
    for (size_t i = 0; i < n; ++i)
        for (size_t t = 0; t < token_bits_.size(); ++t)
            if (bitmasks[i][t >> 5] >> (t & 31) & 1) token_bits_[t] = uint32_t(1) << i;
    require((text_slices >> n) == 0, "a text slice out of range");
    for (size_t i = 0; i < n; ++i)
        if (text_slices >> i & 1 && infinite[i]) {
            require(text_language_ < 0, "one infinite text slice");
            text_language_ = int(i);
        }
    require(!text_slices || text_language_ >= 0, "the text slices need an infinite one");
    text_up_to_.assign(size_t(kMaxTextLength) * n_words, 0);
    if (text_language_ >= 0) {
        const DFATable& text = languages[size_t(text_language_)];
        inside_character_.assign(size_t(text.n_states), 0);
        for (int64_t r = 0; r < text.n_states; ++r)
            for (int b = 0x80; b < 0xC0; ++b)
                if (text.at(int32_t(r), uint8_t(b))) inside_character_[size_t(r)] = 1;
        // per depth on the path to a node: the text language's state and characters read
        std::vector<int32_t> state{starts[size_t(text_language_)]};
        std::vector<int> characters{0};
        for (size_t v = 1; v < trie->n_nodes(); ++v) {
            const auto d = size_t(trie->depth[v]);
            const uint8_t b = trie->byte[v];
            state.resize(d + 1);
            characters.resize(d + 1);
            const int32_t before = state[d - 1];
            state[d] = before ? text.at(before, b) : 0;
            characters[d] = characters[d - 1] + ((b & 0xC0) != 0x80);
            for (int64_t k = trie->token_start[v]; k < trie->token_start[v + 1]; ++k) {
                const auto t = size_t(trie->tokens[size_t(k)]);
                if (!(token_bits_[t] & text_slices)) continue;
                require(state[d] && !inside_character_[size_t(state[d])],
                        "a token of a text slice is not a string of the infinite text slice");
                for (int c = characters[d]; c <= kMaxTextLength; ++c)
                    text_up_to_[size_t(c - 1) * n_words + (t >> 5)] |= uint32_t(1) << (t & 31);
            }
        }
    }
    slot_bits_.resize(trie->tokens.size());
    for (size_t k = 0; k < slot_bits_.size(); ++k)
        slot_bits_[k] = token_bits_[size_t(trie->tokens[k])];
    const size_t nodes = trie->n_nodes();
    subtree_bits_.assign(nodes, 0);
    for (size_t v = nodes; v-- > 0;) {  // children come after their parent (DFS order)
        uint32_t& bits = subtree_bits_[v];
        for (int64_t k = trie->token_start[v]; k < trie->token_start[v + 1]; ++k)
            bits |= token_bits_[size_t(trie->tokens[size_t(k)])];
        for (int64_t k = trie->child_start[v]; k < trie->child_start[v + 1]; ++k)
            bits |= subtree_bits_[size_t(trie->children[size_t(k)])];
    }
}

MaskFiller::MaskFiller(std::shared_ptr<CFGCore> core, std::shared_ptr<const Slices> slices,
                       std::vector<std::pair<int32_t, int64_t>> specials,
                       std::vector<int64_t> eos, size_t max_pairs, size_t max_piece_entries,
                       size_t max_piece_bytes)
    : core_(std::move(core)),
      slices_(std::move(slices)),
      specials_(std::move(specials)),
      eos_(std::move(eos)),
      max_pairs_(max_pairs),
      pieces_(max_piece_entries, max_piece_bytes) {
    representatives_.resize(slices_->languages.size());
    const auto bits = int64_t(slices_->n_words) * 32;
    for (const auto& [lexeme, token] : specials_)
        if (lexeme < 0 || size_t(lexeme) >= core_->lexer().n_lexemes() || token < 0 ||
            token >= bits)
            throw std::invalid_argument("a special token is out of range");
    for (int64_t token : eos_)
        if (token < 0 || token >= bits) throw std::invalid_argument("an EOS id is out of range");
    for (size_t i = 0; i < slices_->languages.size(); ++i) order_.push_back(int(i));
    std::stable_sort(order_.begin(), order_.end(), [this](int a, int b) {
        return slices_->within[size_t(a)].size() < slices_->within[size_t(b)].size();
    });
    const int text = slices_->text_language();
    if (text >= 0) {
        text_below_.slices = slices_->text_slices;
        text_below_.admitted_after = [this, text](int32_t q) {
            return bool(decided(q).admitted >> text & 1);
        };
    }
}

size_t MaskFiller::heap_bytes() const {
    size_t out = vector_bytes(specials_) + vector_bytes(eos_) + vector_bytes(order_) +
                 hash_bytes(decided_) + tree_bytes(lexeme_admits_) + tree_bytes(across_) +
                 tree_bytes(ends_inside_) + vector_bytes(representatives_) + pieces_.heap_bytes();
    for (const auto& bytes : representatives_) out += vector_bytes(bytes);
    return out;
}

const std::vector<uint8_t>& MaskFiller::representatives(int slice) {
    std::vector<uint8_t>& found = representatives_[size_t(slice)];
    if (!found.empty()) return found;
    const Lexer& lexer = core_->lexer();
    std::map<std::tuple<int32_t, int32_t, int32_t>, uint8_t> groups;
    for (int b = 0; b < 256; ++b) {
        const auto byte = uint8_t(b);
        auto group = std::make_tuple(lexer.classes()[byte], lexer.end_class(byte),
                                     slices_->language_class(slice, byte));
        if (groups.emplace(group, byte).second) found.push_back(byte);
    }
    return found;
}

bool MaskFiller::admits(int32_t s, int slice) {
    Lexer& lexer = core_->lexer();
    const DFATable& language = slices_->languages[size_t(slice)];
    const int32_t start = slices_->starts[size_t(slice)];
    const Combo alive = lexer.key(s);
    for (const auto& [j, at] : alive) {
        auto key = std::make_tuple(j, at, slice);
        auto found = lexeme_admits_.find(key);
        bool ok;
        if (found != lexeme_admits_.end()) {
            ok = found->second;
        } else {
            LexemeDFA& dfa = lexer.lexeme(j);
            const bool outgrows = dfa.counted && dfa.counted->bounded() &&
                                  slices_->infinite[size_t(slice)];
            const auto& classes = lexer.classes();
            ok = !outgrows && constrain::admits(
                                  [&](int32_t q, uint8_t b) {
                                      return dfa.next(q, dfa.own_of_joint[size_t(classes[b])]);
                                  },
                                  at, language, start, max_pairs_, representatives(slice));
            lexeme_admits_.emplace(key, ok);
        }
        if (ok) return true;
    }
    if (alive.size() <= 1) return false;
    return constrain::admits([&](int32_t q, uint8_t b) { return lexer.next(q, b); }, s, language,
                             start, max_pairs_, representatives(slice));
}

uint32_t MaskFiller::decide(std::vector<int8_t> known,
                            const std::function<int8_t(int)>& ask) const {
    const auto& within = slices_->within;
    const size_t n = within.size();
    for (int i : order_) {
        if (known[size_t(i)] >= 0) continue;
        const int8_t ok = ask(i);
        if (ok < 0) continue;
        known[size_t(i)] = ok;
        for (size_t j = 0; j < n; ++j) {  // what a language inside or around i's must answer
            if (known[j] >= 0) continue;
            const auto& holders = ok ? within[j] : within[size_t(i)];
            const int other = ok ? i : int(j);
            if (std::find(holders.begin(), holders.end(), other) != holders.end())
                known[j] = ok;
        }
    }
    uint32_t combination = 0;
    for (size_t i = 0; i < n; ++i)
        if (known[i] == 1) combination |= uint32_t(1) << i;
    return combination;
}

SliceDecision MaskFiller::decided(int32_t s) {
    auto found = decided_.find(s);
    if (found != decided_.end()) return found->second;
    SliceDecision decision;
    decision.admitted = decide(std::vector<int8_t>(slices_->within.size(), -1),
                               [this, s](int i) { return int8_t(admits(s, i)); });
    const uint32_t text = slices_->text_slices;
    if (text && (decision.admitted & text) != text) decision.text_length = text_length(s);
    decided_.emplace(s, decision);
    return decision;
}

int MaskFiller::text_length(int32_t s) {
    Lexer& lexer = core_->lexer();
    const int language = slices_->text_language();
    const DFATable& text = slices_->languages[size_t(language)];
    const std::vector<uint8_t>& bytes = representatives(language);
    using Pair = std::pair<int32_t, int32_t>;  // (text language state, lexer state)
    std::vector<Pair> level{{slices_->starts[size_t(language)], s}}, next_level, inside;
    int live_up_to = -1;  // the longest length whose every text string is live, once known
    for (int length = 1; length <= Slices::kMaxTextLength + 1; ++length) {
        next_level.clear();
        inside = level;  // one more character from each pair, byte by byte
        while (!inside.empty()) {
            const auto [r, q] = inside.back();
            inside.pop_back();
            const int32_t tag = lexer.tag(q);
            for (uint8_t b : bytes) {
                const int32_t r2 = text.at(r, b);
                if (!r2) continue;
                const int32_t q2 = lexer.next(q, b);
                if (!q2) {
                    if (tag && lexer.can_end(tag, b)) return -1;  // not by length
                    if (live_up_to < 0) live_up_to = length - 1;
                    continue;
                }
                auto& into = slices_->inside_character(r2) ? inside : next_level;
                if (std::find(into.begin(), into.end(), Pair{r2, q2}) == into.end())
                    into.emplace_back(r2, q2);
                if (inside.size() + next_level.size() > kTextLevelStates) return -1;
            }
        }
        if (next_level.empty()) return live_up_to == length - 1 ? live_up_to : -1;
        if (live_up_to >= 0) return -1;  // some strings of this length live, some not
        level.swap(next_level);
    }
    return -1;
}

bool MaskFiller::ends_inside(int32_t s, int slice) {
    const auto key = std::make_pair(s, slice);
    auto found = ends_inside_.find(key);
    if (found != ends_inside_.end()) return found->second;
    Lexer& lexer = core_->lexer();
    const DFATable& language = slices_->languages[size_t(slice)];
    const int32_t start = slices_->starts[size_t(slice)];
    const std::vector<uint8_t>& bytes = representatives(slice);
    PairSet seen(start, s);
    std::vector<std::pair<int32_t, int32_t>> stack{{start, s}};
    bool ends = false;
    while (!stack.empty() && !ends && seen.size() <= kAcrossPairs) {
        auto [r, q] = stack.back();
        stack.pop_back();
        const int32_t tag = lexer.tag(q);
        for (size_t k = 0; k < bytes.size() && !ends; ++k) {
            const uint8_t b = bytes[k];
            const int32_t r2 = language.at(r, b);
            if (!r2) continue;
            const int32_t q2 = lexer.next(q, b);
            if (!q2) {
                ends = tag && lexer.can_end(tag, b);
                continue;
            }
            if (seen.insert(r2, q2)) stack.emplace_back(r2, q2);
        }
    }
    ends_inside_.emplace(key, ends);
    return ends;
}

SliceDecision MaskFiller::decided(const NodeRef& node, int32_t s, Meter& meter) {
    SliceDecision decision = decided(s);
    const size_t n = slices_->within.size();
    if (decision.text_length >= 0 || decision.admitted == (uint32_t(1) << n) - 1)
        return decision;
    const auto key = std::make_pair(node->serial, s);
    auto found = across_.find(key);
    if (found != across_.end()) {
        decision.admitted = found->second;
        return decision;
    }
    // the slices the lexer state refused, asked again with lexemes ending inside their strings
    // (only finite slices with tokens whose strings may end the lexeme in progress)
    std::vector<int8_t> known(n, -1);
    for (size_t i = 0; i < n; ++i)
        if (decision.admitted >> i & 1) known[i] = 1;
    decision.admitted = decide(std::move(known), [&](int i) -> int8_t {
        if (slices_->empty(i) || slices_->infinite[size_t(i)] || !ends_inside(s, i)) return -1;
        return core_->admits(node, s, slices_->languages[size_t(i)], slices_->starts[size_t(i)],
                             kAcrossPairs, meter, representatives(i));
    });
    if (across_.size() >= kAcrossKept) across_.clear();
    across_.emplace(key, decision.admitted);
    return decision;
}

bool MaskFiller::fill(const NodeRef& node, int32_t s, uint32_t* row, Meter& meter) {
    if (!node) throw std::invalid_argument("a chart node is required");
    if (s < 0 || size_t(s) >= core_->lexer().n_states())
        throw std::invalid_argument("lexer state out of range");
    const int32_t started = s ? s : core_->start_of(*node);
    const SliceDecision decision = decided(node, started, meter);
    uint32_t skipped = decision.admitted;  // the slices whose tokens the walk need not read
    const size_t n_words = slices_->n_words;
    auto add_words = [row, n_words](const uint32_t* words) {
        for (size_t w = 0; w < n_words; ++w) row[w] |= words[w];
    };
    uint32_t skipped_by_length = 0;  // the text family, when decided by length
    if (decision.text_length >= 0) {
        skipped_by_length = slices_->text_slices;
        skipped |= skipped_by_length;
        if (decision.text_length > 0) add_words(slices_->text_up_to(decision.text_length));
    }
    for (size_t i = 0; i < slices_->bitmasks.size(); ++i)
        if ((decision.admitted & ~skipped_by_length) >> i & 1)
            add_words(slices_->bitmasks[i].data());
    core_->walk(node, started, *slices_->trie, slices_->filter(skipped), pieces_, meter,
                [row, this](const Piece& piece) {
                    piece.each_token(*slices_->trie, [row](int32_t t) { set_bit(row, t); });
                },
                text_below_.slices ? &text_below_ : nullptr);
    NodeRef after = core_->after_lexeme(node, s, meter);
    if (after) {
        for (const auto& [lexeme, token] : specials_)
            if (std::binary_search(after->expected.begin(), after->expected.end(), lexeme))
                set_bit(row, token);
        if (after->accepts)
            for (int64_t token : eos_) set_bit(row, token);
    }
    return std::any_of(row, row + n_words, [](uint32_t w) { return w != 0; });
}

void fill_batch(std::vector<FillJob>& jobs, int threads) {
    std::map<std::mutex*, std::vector<FillJob*>> by_grammar;
    for (FillJob& job : jobs) by_grammar[&job.filler->core().lexer().mutex()].push_back(&job);
    std::vector<std::pair<std::mutex*, std::vector<FillJob*>>> groups(by_grammar.begin(),
                                                                      by_grammar.end());
    std::atomic<size_t> next{0};
    auto work = [&groups, &next] {
        for (size_t g = next++; g < groups.size(); g = next++) {
            std::lock_guard<std::mutex> lock(*groups[g].first);
            for (FillJob* job : groups[g].second) {
                try {
                    Meter unmetered;
                    job->any = job->filler->fill(job->node, job->s, job->row, unmetered);
                } catch (...) {
                    job->error = std::current_exception();
                }
            }
        }
    };
    std::vector<std::thread> pool;
    const size_t helpers =
        std::min(groups.size(), size_t(std::max(threads, 1))) - (groups.empty() ? 0 : 1);
    for (size_t i = 0; i < helpers; ++i) pool.emplace_back(work);
    work();
    for (std::thread& t : pool) t.join();
}

}  // namespace constrain
