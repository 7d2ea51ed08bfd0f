// The duplicate-key check of a JSON Schema grammar, whole in native code: its immutable states,
// what a token does to them, and which tokens of a vocabulary complete a repeated key. The
// reference is JsonChecks in constrain/jsonschema/checks.py (with no shapes followed and nothing
// validated); keys compare as json.loads reads them.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "json_keys.hpp"
#include "texts.hpp"

namespace constrain {

// A key's text as written between its quotes -> its value, as the bytes of the string json.loads
// gives encoded to UTF-8 with "surrogatepass" (equal exactly when the strings are). False: the
// text is not a JSON string's (a bad escape, a control byte, bytes that are not UTF-8).
bool decode_key(std::string_view text, std::string& value);

// The one JSON text the grammar admits for a key's value, quotes included (json.dumps with
// ensure_ascii=False: `"`, `\` and control bytes escaped).
std::string spell_key(std::string_view value);

// The keys of an object, sorted by value (shared by the states that hold them).
struct KeySet {
    std::vector<std::string> values;
    std::vector<std::string> spellings;  // spell_key of each value
    bool contains(std::string_view value) const;
    // A copy with `value` added (not already in).
    std::shared_ptr<const KeySet> with(const std::string& value) const;
};

struct KeyFrame {
    bool is_object;
    std::shared_ptr<const KeySet> keys;  // null: no key yet (and every array)
};

// Where the scanner is: its mode, open containers (innermost last) and the key in progress.
struct KeyState {
    int mode = kValue;
    bool escaped = false;  // the last byte read was an escaping backslash
    std::string text;      // the key in progress, as written
    std::vector<KeyFrame> frames;

    // What the refusals depend on, as bytes (the format of JsonChecks.state_key); built once.
    const std::string& key() const;
    mutable std::string built_key;  // empty until `key` is asked (a key is never empty)
    bool same_as(const KeyState& other) const;
};

// The state after `n` bytes from `from`, into `out`; false when they complete a repeated key.
bool feed_keys(const KeyState& from, const uint8_t* data, size_t n, KeyState& out);

// A vocabulary's token texts and the selections the check reads (computed by the caller).
struct KeyVocabulary {
    std::shared_ptr<const TokenTexts> texts;
    std::vector<int64_t> sorted;           // the text tokens in byte order
    std::vector<std::vector<int64_t>> quotes;  // [n]: the tokens with at least n quotes
    std::vector<int64_t> exits;            // tokens that leave a string and complete a value
    std::vector<int64_t> exits_or_escapes; // those and the tokens holding a backslash
    std::string_view text(int64_t token) const { return texts->text(token); }
    int64_t size() const { return texts->size(); }
};

// The check over one vocabulary (`escapes`: the grammar admits every spelling of a string).
class KeyCheck {
  public:
    KeyCheck(KeyVocabulary vocabulary, bool escapes);
    // Whether the check lets `token` through from `state`.
    bool allows(const KeyState& state, int64_t token) const;
    // The tokens that could be refused from `state` (a superset of the refused ones), sorted.
    std::vector<int64_t> risky(const KeyState& state) const;
    // The tokens of `tokens` the check refuses from `state`, in their order.
    std::vector<int64_t> refused(const KeyState& state, const int64_t* tokens, size_t n) const;
    // Every token the check refuses from `state`, sorted.
    std::vector<int64_t> refusals(const KeyState& state) const;
    int64_t size() const { return vocabulary_.size(); }

  private:
    // The tokens whose texts start with `prefix`: a range of `vocabulary_.sorted`.
    std::pair<size_t, size_t> with_prefix(std::string_view prefix) const;
    // Visit each risky token (a token in two selections twice): ranges of the sorted tokens
    // whose texts spell the rest of an earlier key, then one of the listed selections.
    template <class Visit>
    void each_risky(const KeyState& state, Visit&& visit) const;

    KeyVocabulary vocabulary_;
    bool escapes_;
};

}  // namespace constrain
