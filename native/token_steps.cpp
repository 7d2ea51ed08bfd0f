#include "token_steps.hpp"

#include <algorithm>
#include <stdexcept>

namespace constrain {

TokenSteps::TokenSteps(std::shared_ptr<CFGCore> core, std::shared_ptr<const TokenTexts> texts,
                       std::vector<std::pair<int32_t, int64_t>> specials,
                       std::vector<int64_t> eos)
    : core_(std::move(core)), texts_(std::move(texts)), specials_(std::move(specials)),
      eos_(std::move(eos)) {
    if (!core_ || !texts_) throw std::invalid_argument("a grammar core and token texts are needed");
    auto outside = [this](int64_t t) { return t < 0 || t >= texts_->size(); };
    for (const auto& [lexeme, token] : specials_)
        if (outside(token)) throw std::invalid_argument("a special token id is out of range");
    for (int64_t token : eos_)
        if (outside(token)) throw std::invalid_argument("an EOS id is out of range");
    std::sort(specials_.begin(), specials_.end(),
              [](const auto& a, const auto& b) { return a.second < b.second; });
    std::sort(eos_.begin(), eos_.end());
}

bool TokenSteps::step(NodeRef& node, int32_t& s, int64_t token, Meter& meter) {
    if (token < 0 || token >= texts_->size()) return false;
    auto first = std::lower_bound(specials_.begin(), specials_.end(), token,
                                  [](const auto& p, int64_t t) { return p.second < t; });
    if (first != specials_.end() && first->second == token) {
        // the lexeme in progress ends, then the special terminal is scanned
        NodeRef after = core_->after_lexeme(node, s, meter);
        if (!after) return false;
        std::vector<int32_t> scanned;
        for (auto it = first; it != specials_.end() && it->second == token; ++it)
            if (std::binary_search(after->expected.begin(), after->expected.end(), it->first))
                scanned.push_back(it->first);
        if (scanned.empty()) return false;
        std::sort(scanned.begin(), scanned.end());
        NodeRef next = core_->parser().scan(after, scanned, meter);
        if (!next) return false;
        node = std::move(next);
        s = CFGCore::kFresh;
        return true;
    }
    std::string_view data = texts_->text(token);
    if (data.empty()) return false;  // EOS, padding: no text
    return core_->step(node, s, reinterpret_cast<const uint8_t*>(data.data()), data.size(),
                       meter);
}

bool TokenSteps::allows(const NodeRef& node, int32_t s, int64_t token, Meter& meter) {
    if (std::binary_search(eos_.begin(), eos_.end(), token)) return accepting(node, s, meter);
    NodeRef n = node;
    return step(n, s, token, meter);
}

bool TokenSteps::accepting(const NodeRef& node, int32_t s, Meter& meter) {
    NodeRef after = core_->after_lexeme(node, s, meter);
    return after && after->accepts;
}

TokenCursor::TokenCursor(std::shared_ptr<TokenSteps> steps, std::shared_ptr<const KeyCheck> keys)
    : steps_(std::move(steps)), keys_(std::move(keys)) {
    if (!steps_) throw std::invalid_argument("a cursor needs token steps");
    if (keys_ && keys_->size() != steps_->n_tokens())
        throw std::invalid_argument("the key check is over another vocabulary");
}

void TokenCursor::move_to(NodeRef node, int32_t s, std::shared_ptr<const KeyState> here) {
    if (!node) throw std::invalid_argument("a cursor moves to a chart node");
    if (keys_ && !here) throw std::invalid_argument("a cursor with a key check needs its state");
    node_ = std::move(node);
    s_ = s;
    here_ = std::move(here);
}

void TokenCursor::finish() {
    node_.reset();
    here_.reset();
}

bool TokenCursor::allows(int64_t token) {
    if (!node_) return false;
    return steps_->allows(node_, s_, token, unmetered_) && (!keys_ || keys_->allows(*here_, token));
}

}  // namespace constrain
