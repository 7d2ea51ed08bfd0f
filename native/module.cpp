// Python bindings of the native engine core: `constrain.engine.native`.
#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <cstring>

#include "admits.hpp"
#include "cfg.hpp"
#include "masks.hpp"
#include "token_steps.hpp"
#include "key_check.hpp"
#include "lexer.hpp"
#include "trie.hpp"

namespace py = pybind11;
using namespace constrain;

namespace {

// The grammar's lock for one call from Python (see Lexer::mutex). Code holding it never
// takes the GIL (batch workers run without it), so waiting for it with the GIL is safe.
struct Hold {
    std::lock_guard<std::mutex> lock;
    explicit Hold(const Lexer& lexer) : lock(lexer.mutex()) {}
};

// A `TokenCursor` for Python: `on_limit(lexemes)` (unless None) makes the error that `allows`
// raises when the lexer reaches its state limit, so a check site needs no handler of its own.
struct CursorBinding {
    TokenCursor cursor;
    py::object on_limit;

    CursorBinding(std::shared_ptr<TokenSteps> steps, std::shared_ptr<const KeyCheck> keys,
                  py::object on_limit)
        : cursor(std::move(steps), std::move(keys)), on_limit(std::move(on_limit)) {}

    bool allows(int64_t token) {
        try {
            Hold hold(cursor.steps().core().lexer());
            return cursor.allows(token);
        } catch (const LexerLimit& e) {
            if (on_limit.is_none()) throw;
            py::object err = on_limit(py::cast(e.lexemes));
            PyErr_SetObject(reinterpret_cast<PyObject*>(Py_TYPE(err.ptr())), err.ptr());
            throw py::error_already_set();
        }
    }
};

template <typename T>
using Array = py::array_t<T, py::array::c_style | py::array::forcecast>;

template <typename T>
std::vector<T> to_vector(const Array<T>& a) {
    return std::vector<T>(a.data(), a.data() + a.size());
}

template <typename T>
py::array_t<T> to_array(std::vector<T>&& v) {
    auto* owned = new std::vector<T>(std::move(v));
    py::capsule free(owned, [](void* p) { delete static_cast<std::vector<T>*>(p); });
    return py::array_t<T>({py::ssize_t(owned->size())}, {py::ssize_t(sizeof(T))}, owned->data(),
                          free);
}

// The own class of each byte, checked against `n_own`.
std::array<int32_t, 256> own_of_byte_from(const py::handle& given, int n_own) {
    auto own_of_byte = given.cast<Array<int32_t>>();
    if (own_of_byte.size() != 256) throw py::value_error("own_of_byte must have 256 entries");
    std::array<int32_t, 256> own{};
    for (int b = 0; b < 256; ++b) {
        own[size_t(b)] = own_of_byte.data()[b];
        if (own[size_t(b)] < 0 || own[size_t(b)] >= n_own)
            throw py::value_error("own class out of range");
    }
    return own;
}

// The every-escape spelling of a base table (n_base x n_own), its bytes checked.
std::shared_ptr<JsonEscapes> escapes_from(std::vector<int32_t> table, int n_own, int32_t n_base,
                                          int32_t start, bool in_string,
                                          const std::array<int32_t, 256>& own) {
    for (unsigned char c : std::string("\\u0123456789abcdefABCDEFbfnrt\"/"))
        for (int b = 0; b < 256; ++b)
            if (b != c && own[size_t(b)] == own[size_t(c)])
                throw py::value_error("a byte an escape reads must have a class of its own");
    return std::make_shared<JsonEscapes>(std::move(table), n_own, n_base, start, in_string, own);
}

// A table (n, own classes) with its accepting flags, every transition inside it.
void table_from(const py::handle& given_table, const py::handle& given_accepting,
                std::vector<int32_t>& table, std::vector<uint8_t>& accepting, int& n_own) {
    auto t = given_table.cast<Array<int32_t>>();
    if (t.ndim() != 2) throw py::value_error("a lexeme table must be 2-D");
    n_own = int(t.shape(1));
    table = to_vector(t);
    accepting = to_vector(given_accepting.cast<Array<uint8_t>>());
    if (accepting.size() != size_t(t.shape(0)))
        throw py::value_error("accepting and table disagree on the number of states");
    for (int32_t s : table)
        if (s < 0 || size_t(s) >= accepting.size())
            throw py::value_error("a lexeme transition leads outside its table");
}

// (table, accepting, own class of each byte, start, in_string or None: no escapes)
ByteWalk walk_from(const py::tuple& spec) {
    if (spec.size() != 5) throw py::value_error("a walk is (table, accepting, own, start, escapes)");
    ByteWalk walk;
    table_from(spec[0], spec[1], walk.table, walk.accepting, walk.n_own);
    walk.own_of_byte = own_of_byte_from(spec[2], walk.n_own);
    walk.start = spec[3].cast<int32_t>();
    if (walk.start < 0 || size_t(walk.start) >= walk.accepting.size())
        throw py::value_error("a walk's start state is outside its table");
    if (!spec[4].is_none()) {
        walk.escapes = escapes_from(std::move(walk.table), walk.n_own,
                                    int32_t(walk.accepting.size()), walk.start,
                                    spec[4].cast<bool>(), walk.own_of_byte);
        walk.table.clear();
    }
    return walk;
}

// (strings walk, char walk, low, high or -1, boundary of each base state, lengths (window x
//  boundaries), first, period, a byte of each class, the quote's class)
std::shared_ptr<CountedStrings> counted_from(const py::tuple& spec) {
    if (spec.size() != 10) throw py::value_error("a counted lexeme spec has 10 entries");
    ByteWalk strings = walk_from(spec[0].cast<py::tuple>());
    ByteWalk chr = walk_from(spec[1].cast<py::tuple>());
    auto low = spec[2].cast<int64_t>(), high = spec[3].cast<int64_t>();
    if (low < 0 || high < -1) throw py::value_error("length bounds out of range");
    CompletionLengths lengths;
    lengths.index = to_vector(spec[4].cast<Array<int32_t>>());
    auto table = spec[5].cast<Array<uint8_t>>();
    if (table.ndim() != 2) throw py::value_error("completion lengths must be 2-D");
    lengths.window = table.shape(0);
    lengths.n_boundaries = table.shape(1);
    lengths.lengths = to_vector(table);
    if (lengths.index.size() != strings.accepting.size())
        throw py::value_error("a boundary index needs one entry per base state");
    for (int32_t i : lengths.index)
        if (i < -1 || i >= lengths.n_boundaries) throw py::value_error("boundary out of range");
    lengths.first = spec[6].cast<int64_t>();
    lengths.period = spec[7].cast<int64_t>();
    if (lengths.first < 0 || lengths.period < 0 || lengths.first + lengths.period > lengths.window)
        throw py::value_error("the period of completion lengths is outside its window");
    auto bytes = to_vector(spec[8].cast<Array<uint8_t>>());
    if (bytes.empty()) throw py::value_error("a counted lexeme needs its classes' bytes");
    int quote = spec[9].cast<int>();
    if (quote < 0 || size_t(quote) >= bytes.size() || bytes[size_t(quote)] != '"')
        throw py::value_error("the quote's class is out of range");
    return std::make_shared<CountedStrings>(std::move(strings), std::move(chr), low, high,
                                            std::move(lengths), std::move(bytes), quote);
}

LexemeDFA lexeme_from(const py::tuple& spec) {
    // (table (n, own classes) int32, accepting bool (n,), own class of each joint class,
    //  start, priority, owners [ids], blocked bool (256,) or None, escapes or None,
    //  counted or None: with a counted spec the table and start are unused)
    LexemeDFA dfa;
    if (spec.size() > 8 && !spec[8].is_none()) {
        dfa.counted = counted_from(spec[8].cast<py::tuple>());
        dfa.n_own = dfa.counted->n_classes();
        dfa.start = dfa.counted->start();
    } else {
        table_from(spec[0], spec[1], dfa.table, dfa.accepting, dfa.n_own);
        dfa.start = spec[3].cast<int32_t>();
        if (dfa.start < 0 || size_t(dfa.start) >= dfa.accepting.size())
            throw py::value_error("a lexeme start state is outside its table");
    }
    dfa.own_of_joint = to_vector(spec[2].cast<Array<int32_t>>());
    for (int32_t own : dfa.own_of_joint)
        if (own < 0 || own >= dfa.n_own) throw py::value_error("own class out of range");
    dfa.priority = spec[4].cast<int>();
    dfa.owners = spec[5].cast<std::vector<int>>();
    if (!spec[6].is_none()) {
        auto blocked = spec[6].cast<Array<uint8_t>>();
        if (blocked.size() != 256) throw py::value_error("blocked must have 256 entries");
        for (int b = 0; b < 256; ++b) dfa.blocked[size_t(b)] = blocked.data()[b];
    }
    if (spec.size() > 7 && !spec[7].is_none()) {  // (in_string, own class of each byte)
        if (dfa.counted) throw py::value_error("a counted lexeme spells escapes in its walks");
        auto escapes = spec[7].cast<py::tuple>();
        if (escapes.size() != 2) throw py::value_error("escapes are (in_string, own_of_byte)");
        dfa.escapes = escapes_from(std::move(dfa.table), dfa.n_own, int32_t(dfa.accepting.size()),
                                   dfa.start, escapes[0].cast<bool>(),
                                   own_of_byte_from(escapes[1], dfa.n_own));
        dfa.table.clear();
    }
    return dfa;
}

Trie trie_from(const py::object& t) {
    Trie trie;
    trie.byte = to_vector(t.attr("byte").cast<Array<uint8_t>>());
    trie.depth = to_vector(t.attr("depth").cast<Array<int32_t>>());
    trie.subtree_end = to_vector(t.attr("subtree_end").cast<Array<int64_t>>());
    trie.token_start = to_vector(t.attr("token_start").cast<Array<int64_t>>());
    trie.tokens = to_vector(t.attr("tokens").cast<Array<int64_t>>());
    trie.child_start = to_vector(t.attr("child_start").cast<Array<int64_t>>());
    trie.children = to_vector(t.attr("children").cast<Array<int64_t>>());
    try {
        trie.validate();
    } catch (const std::invalid_argument& e) {
        throw py::value_error(e.what());
    }
    return trie;
}

// The duplicate-key check's vocabulary: the shared texts and what it selects among them.
KeyVocabulary key_vocabulary_from(std::shared_ptr<const TokenTexts> texts,
                                  const Array<int64_t>& sorted, const py::list& quotes,
                                  const Array<int64_t>& exits,
                                  const Array<int64_t>& exits_or_escapes) {
    KeyVocabulary out;
    out.texts = std::move(texts);
    out.sorted = to_vector(sorted);
    for (const py::handle& ids : quotes) out.quotes.push_back(to_vector(ids.cast<Array<int64_t>>()));
    out.exits = to_vector(exits);
    out.exits_or_escapes = to_vector(exits_or_escapes);
    return out;
}

void bind_texts(py::module_& m) {
    py::class_<TokenTexts, std::shared_ptr<TokenTexts>>(
        m, "TokenTexts", "A vocabulary's token texts, copied once for the native objects.")
        .def(py::init([](const py::iterable& texts) {
                 auto out = std::make_shared<TokenTexts>();
                 for (const py::handle& text : texts) {
                     std::string_view data = text.cast<py::bytes>();
                     out->bytes.insert(out->bytes.end(), data.begin(), data.end());
                     out->offsets.push_back(int64_t(out->bytes.size()));
                 }
                 return out;
             }),
             py::arg("texts"), "From every id's bytes in id order (b\"\": no text).")
        .def("__len__", &TokenTexts::size)
        .def(
            "__getitem__",
            [](const TokenTexts& t, int64_t token) {
                if (token < 0 || token >= t.size()) throw py::index_error("token id out of range");
                return py::bytes(std::string(t.text(token)));
            },
            py::arg("token"));
}

void bind_key_check(py::module_& m) {
    using State = std::shared_ptr<KeyState>;
    py::class_<KeyState, State>(
        m, "KeyCheckState",
        "A state of the duplicate-key check: the scanner's mode, the key in progress and the "
        "keys of each open object (immutable).")
        .def(py::init<>())
        .def(
            "fed",
            [](const State& self, const py::bytes& data) -> py::object {
                std::string bytes(data);
                auto out = std::make_shared<KeyState>();
                if (!feed_keys(*self, reinterpret_cast<const uint8_t*>(bytes.data()),
                               bytes.size(), *out))
                    return py::none();
                if (out->same_as(*self)) return py::cast(self);  // the same object
                return py::cast(out);
            },
            py::arg("data"), "The state after `data`, or None when it completes a repeated key.")
        .def(
            "key", [](const KeyState& self) { return py::bytes(self.key()); },
            "What the refusals depend on, as bytes (equal exactly when they are).");
    py::class_<KeyCheck, std::shared_ptr<KeyCheck>>(
        m, "KeyCheck", "The duplicate-key check over one vocabulary: which tokens it refuses.")
        .def(py::init([](std::shared_ptr<TokenTexts> texts, const Array<int64_t>& sorted,
                         const py::list& quotes, const Array<int64_t>& exits,
                         const Array<int64_t>& exits_or_escapes, bool escapes) {
                 return std::make_shared<KeyCheck>(
                     key_vocabulary_from(std::move(texts), sorted, quotes, exits,
                                         exits_or_escapes),
                     escapes);
             }),
             py::arg("texts"), py::arg("sorted"), py::arg("quotes"), py::arg("exits"),
             py::arg("exits_or_escapes"), py::arg("escapes"))
        .def("allows", &KeyCheck::allows, py::arg("state"), py::arg("token"))
        .def(
            "risky", [](const KeyCheck& c, const KeyState& s) { return to_array(c.risky(s)); },
            py::arg("state"))
        .def(
            "refused",
            [](const KeyCheck& c, const KeyState& s, const Array<int64_t>& tokens) {
                return to_array(c.refused(s, tokens.data(), size_t(tokens.size())));
            },
            py::arg("state"), py::arg("tokens"))
        .def(
            "refusals", [](const KeyCheck& c, const KeyState& s) { return to_array(c.refusals(s)); },
            py::arg("state"))
        .def("__len__", &KeyCheck::size);
    m.def(
        "decode_key",
        [](const py::bytes& text) -> py::object {
            std::string value;
            if (!decode_key(std::string(text), value)) return py::none();
            return py::bytes(value);
        },
        py::arg("text"),
        "A key's value from its text between the quotes, as UTF-8 with surrogates passed "
        "(None: not a JSON string).");
}


// A chart node's items for Python: (dotted rule, origin node or None: the node itself).
py::list items_of(const ChartNode& node) {
    py::list out;
    for (const Item& item : node.items) {
        py::object origin = py::none();
        if (item.origin) origin = py::cast(item.origin->shared_from_this());
        out.append(py::make_tuple(item.dotted, origin));
    }
    return out;
}

// The parser's dotted rules, checked (see DottedRules::validate).
DottedRules rules_from(const Array<int32_t>& next_sym, const Array<int32_t>& lhs,
                       const py::list& nullable, const py::list& first_dotted, int32_t start) {
    DottedRules rules;
    rules.next_sym = to_vector(next_sym);
    rules.lhs = to_vector(lhs);
    for (const py::handle& flag : nullable) rules.nullable.push_back(flag.cast<bool>());
    for (const py::handle& first : first_dotted)
        rules.first_dotted.push_back(first.cast<std::vector<int32_t>>());
    rules.start = start;
    try {
        rules.validate();
    } catch (const std::invalid_argument& e) {
        throw py::value_error(e.what());
    }
    return rules;
}

NodeRef node_given(const NodeRef& node) {
    if (!node) throw py::value_error("a chart node is required, not None");
    return node;
}

int32_t lexer_state_given(CFGCore& core, int32_t s) {
    if (s < 0 || size_t(s) >= core.lexer().n_states()) throw py::value_error("state out of range");
    return s;
}

void bind_cfg(py::module_& m) {
    py::class_<Meter>(m, "Meter", "Units of work a native call may spend; `used` after it.")
        .def(py::init([](int64_t left) { return Meter{left, 0}; }), py::arg("left"))
        .def_readonly("used", &Meter::used)
        .def_readonly("left", &Meter::left);

    py::class_<ChartNode, NodeRef>(m, "ChartNode", "One interned Earley set (see earley.py).")
        .def_property_readonly("items", &items_of)
        .def_property_readonly("expected",
                               [](const ChartNode& n) {
                                   return py::frozenset(py::cast(n.expected));
                               })
        .def_readonly("accepts", &ChartNode::accepts)
        .def_readonly("serial", &ChartNode::serial)
        .def_property_readonly("lexer_start",
                               [](const ChartNode& n) -> py::object {
                                   int32_t start = n.lexer_start.load();
                                   return start < 0 ? py::none() : py::cast(start);
                               })
        .def("__hash__", [](const ChartNode& n) { return std::hash<const void*>()(&n); })
        .def("__eq__", [](const ChartNode& a, const py::object& b) {
            return py::isinstance<ChartNode>(b) && &a == b.cast<const ChartNode*>();
        })
        .def("__repr__", [](const ChartNode& n) {
            return "ChartNode(items=" + std::to_string(n.items.size()) + ", native)";
        });


    py::class_<Slices, std::shared_ptr<Slices>>(m, "Slices", "A vocabulary's slices (slices.py).")
        .def(py::init([](const py::list& languages, const py::list& bitmasks,
                         const py::list& within, size_t n_words,
                         std::shared_ptr<Trie> trie, const std::vector<int>& text_slices) {
                 // languages: (DFATable, start, infinite) per slice
                 auto out = std::make_shared<Slices>();
                 out->n_words = n_words;
                 out->trie = std::move(trie);
                 for (int i : text_slices) {
                     if (i < 0 || i >= 16) throw py::value_error("a text slice out of range");
                     out->text_slices |= uint32_t(1) << i;
                 }
                 for (const py::handle& spec : languages) {
                     auto t = spec.cast<py::tuple>();
                     if (t.size() != 3) throw py::value_error("a slice is (table, start, infinite)");
                     out->languages.push_back(t[0].cast<DFATable>());
                     out->starts.push_back(t[1].cast<int32_t>());
                     out->infinite.push_back(t[2].cast<bool>());
                 }
                 for (const py::handle& words : bitmasks) {
                     auto a = words.cast<Array<int32_t>>();
                     out->bitmasks.emplace_back(a.size());
                     std::memcpy(out->bitmasks.back().data(), a.data(), size_t(a.size()) * 4);
                 }
                 for (const py::handle& holders : within)
                     out->within.push_back(holders.cast<std::vector<int>>());
                 try {
                     out->validate_and_index();
                 } catch (const std::invalid_argument& e) {
                     throw py::value_error(e.what());
                 }
                 return out;
             }),
             py::arg("languages"), py::arg("bitmasks"), py::arg("within"), py::arg("n_words"),
             py::arg("trie"), py::arg("text_slices"));

    py::class_<MaskFiller>(m, "MaskFiller", "A grammar's whole masks over one vocabulary.")
        .def(py::init([](std::shared_ptr<CFGCore> core, std::shared_ptr<Slices> slices,
                         std::vector<std::pair<int32_t, int64_t>> specials,
                         std::vector<int64_t> eos, size_t max_pairs, size_t max_entries,
                         size_t max_bytes) {
                 try {
                     return std::make_unique<MaskFiller>(std::move(core), std::move(slices),
                                                         std::move(specials), std::move(eos),
                                                         max_pairs, max_entries, max_bytes);
                 } catch (const std::invalid_argument& e) {
                     throw py::value_error(e.what());
                 }
             }),
             py::arg("core"), py::arg("slices"), py::arg("specials"), py::arg("eos"),
             py::arg("max_pairs"), py::arg("max_piece_entries"), py::arg("max_piece_bytes"))
        .def(
            "fill",
            [](MaskFiller& f, const NodeRef& node, int32_t s, py::array_t<int32_t> row,
               Meter& meter) {
                node_given(node);
                if (row.ndim() != 1 || size_t(row.shape(0)) != f.n_words() ||
                    !(row.flags() & py::array::c_style) || !row.writeable())
                    throw py::value_error("the row must be a writable int32 array of n_words");
                auto* words = reinterpret_cast<uint32_t*>(row.mutable_data());
                py::gil_scoped_release release;  // other threads' masks run meanwhile
                std::lock_guard<std::mutex> lock(f.core().lexer().mutex());
                return f.fill(node, s, words, meter);
            },
            py::arg("node"), py::arg("s"), py::arg("row"), py::arg("meter"),
            "Set the allowed tokens' bits in `row` (zeroed by the caller); whether any is set.")
        .def_property_readonly("piece_bytes", [](MaskFiller& f) {
            Hold hold(f.core().lexer());
            return f.pieces().bytes();
        })
        .def_property_readonly(
            "nbytes",
            [](MaskFiller& f) {
                Hold hold(f.core().lexer());
                return sizeof(MaskFiller) + f.heap_bytes();
            },
            "Heap bytes its memos and mask pieces hold (not the grammar's nor the vocabulary's).");

    py::class_<TokenSteps, std::shared_ptr<TokenSteps>>(
        m, "TokenSteps", "A grammar read token by token over one vocabulary.")
        .def(py::init([](std::shared_ptr<CFGCore> core, std::shared_ptr<TokenTexts> texts,
                         std::vector<std::pair<int32_t, int64_t>> specials,
                         std::vector<int64_t> eos) {
                 try {
                     return std::make_shared<TokenSteps>(std::move(core), std::move(texts),
                                                         std::move(specials), std::move(eos));
                 } catch (const std::invalid_argument& e) {
                     throw py::value_error(e.what());
                 }
             }),
             py::arg("core"), py::arg("texts"), py::arg("specials"), py::arg("eos"))
        .def(
            "step",
            [](TokenSteps& t, NodeRef node, int32_t s, int64_t token,
               Meter& meter) -> py::object {
                Hold hold(t.core().lexer());
                node_given(node);
                lexer_state_given(t.core(), s);
                if (!t.step(node, s, token, meter)) return py::none();
                return py::make_tuple(std::move(node), s);
            },
            py::arg("node"), py::arg("s"), py::arg("token"), py::arg("meter"),
            "The state after text or special `token` (not EOS), or None when it is not allowed.")
        .def(
            "allows",
            [](TokenSteps& t, const NodeRef& node, int32_t s, int64_t token, Meter& meter) {
                Hold hold(t.core().lexer());
                node_given(node);
                lexer_state_given(t.core(), s);
                return t.allows(node, s, token, meter);
            },
            py::arg("node"), py::arg("s"), py::arg("token"), py::arg("meter"),
            "Whether `token` is allowed: EOS where the text is complete, else as `step`.")
        .def_property_readonly(
            "nbytes",
            [](TokenSteps& t) {
                Hold hold(t.core().lexer());
                return kSharedBlockBytes + sizeof(TokenSteps) + t.heap_bytes();
            },
            "Heap bytes it holds of its own (not the grammar's nor the texts').");

    py::class_<CursorBinding>(
        m, "TokenCursor", "One sequence's position held natively: a check passes only the token.")
        .def(py::init([](std::shared_ptr<TokenSteps> steps, std::shared_ptr<KeyCheck> keys,
                         py::object on_limit) {
                 try {
                     return std::make_unique<CursorBinding>(std::move(steps), std::move(keys),
                                                            std::move(on_limit));
                 } catch (const std::invalid_argument& e) {
                     throw py::value_error(e.what());
                 }
             }),
             py::arg("steps"), py::arg("keys") = py::none(), py::arg("on_limit") = py::none(),
             "A cursor over `steps`, with the duplicate-key check `keys` applied too; when the "
             "lexer reaches its state limit, `allows` raises `on_limit(lexemes)` if given, "
             "else `LexerLimit`.")
        .def(
            "move_to",
            [](CursorBinding& b, const py::tuple& state, std::shared_ptr<KeyState> here) {
                if (state.size() != 2) throw py::value_error("a state is (node, s)");
                auto node = node_given(state[0].cast<NodeRef>());
                auto s = state[1].cast<int32_t>();
                Hold hold(b.cursor.steps().core().lexer());
                lexer_state_given(b.cursor.steps().core(), s);
                try {
                    b.cursor.move_to(std::move(node), s, std::move(here));
                } catch (const std::invalid_argument& e) {
                    throw py::value_error(e.what());
                }
            },
            py::arg("state"), py::arg("here") = py::none(),
            "Move to grammar state `state` = (node, s) and key-check state `here`.")
        .def(
            "finish",
            [](CursorBinding& b) {
                Hold hold(b.cursor.steps().core().lexer());
                b.cursor.finish();
            },
            "The sequence ended (EOS): nothing more is allowed.")
        .def("allows", &CursorBinding::allows, py::arg("token"),
             "Whether `token` is allowed here (unmetered).");

    m.def(
        "fill_batch",
        [](const py::list& jobs, py::array_t<int32_t> out, int threads) {
            if (out.ndim() != 2 || !(out.flags() & py::array::c_style) || !out.writeable())
                throw py::value_error("the bitmask must be a writable C-ordered 2-D int32 array");
            std::vector<FillJob> batch;
            std::vector<py::object> keep;  // the fillers, alive while the batch runs
            std::vector<uint8_t> taken(size_t(out.shape(0)), 0);
            for (const py::handle& spec : jobs) {
                auto t = spec.cast<py::tuple>();
                if (t.size() != 4) throw py::value_error("a job is (filler, node, s, row)");
                FillJob job;
                keep.push_back(py::reinterpret_borrow<py::object>(t[0]));
                job.filler = t[0].cast<MaskFiller*>();
                job.node = node_given(t[1].cast<NodeRef>());
                job.s = t[2].cast<int32_t>();
                auto r = t[3].cast<py::ssize_t>();
                if (r < 0 || r >= out.shape(0)) throw py::value_error("a job's row is out of range");
                if (taken[size_t(r)]++) throw py::value_error("two jobs fill the same row");
                if (size_t(out.shape(1)) != job.filler->n_words())
                    throw py::value_error("the bitmask's rows must have the vocabulary's words");
                job.row = reinterpret_cast<uint32_t*>(out.mutable_data(r, 0));
                batch.push_back(std::move(job));
            }
            {
                py::gil_scoped_release release;
                fill_batch(batch, threads);
            }
            py::list results;
            for (FillJob& job : batch) {
                if (job.error) std::rethrow_exception(job.error);
                results.append(job.any);
            }
            return results;
        },
        py::arg("jobs"), py::arg("out"), py::arg("threads"),
        "Fill row `row` of `out` (zeroed) for each (filler, node, s, row), on `threads` "
        "threads without the GIL: whether any bit is set, per job.");

    m.def("chart_nodes_alive", [] { return ChartNode::alive.load(); },
          "Native chart nodes in existence (every parser's, for leak tests).");

    py::class_<PieceCache>(m, "PieceCache", "A grammar's mask pieces over one trie (bounded).")
        .def(py::init<size_t, size_t>(), py::arg("max_entries"), py::arg("max_bytes"))
        .def("__len__", &PieceCache::size)
        .def_property_readonly("bytes", &PieceCache::bytes)
        .def_readwrite("max_bytes", &PieceCache::max_bytes_);

    py::class_<CFGCore, std::shared_ptr<CFGCore>>(m, "CFGCore", "A grammar's lexer driving its Earley parser (cfg.hpp).")
        .def(py::init([](std::shared_ptr<Lexer> lexer, const Array<int32_t>& next_sym,
                         const Array<int32_t>& lhs, const py::list& nullable,
                         const py::list& first_dotted, int32_t start,
                         const std::vector<int32_t>& ignore, const std::vector<int32_t>& specials,
                         size_t max_items, Meter& meter) {
                 try {
                     return std::make_shared<CFGCore>(
                         std::move(lexer), rules_from(next_sym, lhs, nullable, first_dotted, start),
                         ignore, specials, max_items, meter);
                 } catch (const std::invalid_argument& e) {
                     throw py::value_error(e.what());
                 }
             }),
             py::arg("lexer"), py::arg("next_sym"), py::arg("lhs"), py::arg("nullable"),
             py::arg("first_dotted"), py::arg("start"), py::arg("ignore"), py::arg("specials"),
             py::arg("max_items"), py::arg("meter"))
        .def_property_readonly("root", [](CFGCore& c) { return c.parser().root(); })
        .def_property(
            "max_items",
            [](CFGCore& c) {
                Hold hold(c.lexer());
                return c.parser().max_items;
            },
            [](CFGCore& c, size_t n) {
                Hold hold(c.lexer());
                c.parser().max_items = n;
            })
        .def_property_readonly("items_held",
                               [](CFGCore& c) {
                                   Hold hold(c.lexer());
                                   return c.parser().items_held;
                               })
        .def_property_readonly("forgotten",
                               [](CFGCore& c) {
                                   Hold hold(c.lexer());
                                   return c.parser().forgotten;
                               })
        .def_property_readonly("n_nodes", [](CFGCore& c) {
            Hold hold(c.lexer());
            return c.parser().n_nodes();
        })
        .def_property_readonly(
            "nbytes",
            [](CFGCore& c) {
                Hold hold(c.lexer());
                return kSharedBlockBytes + sizeof(CFGCore) + c.heap_bytes();
            },
            "Heap bytes the parser holds: its rules, its index and every node of its alive (the "
            "lexer's are its own `nbytes`).")
        .def(
            "pieces_nbytes",
            [](CFGCore& c, const PieceCache& cache) {
                Hold hold(c.lexer());
                return sizeof(PieceCache) + cache.heap_bytes();
            },
            py::arg("cache"), "Heap bytes `cache`, a cache of this grammar's pieces, holds.")
        .def(
            "scan",
            [](CFGCore& c, const NodeRef& node, std::vector<int32_t> lexemes, Meter& meter) {
                Hold hold(c.lexer());
                std::sort(lexemes.begin(), lexemes.end());
                lexemes.erase(std::unique(lexemes.begin(), lexemes.end()), lexemes.end());
                return c.parser().scan(node_given(node), lexemes, meter);
            },
            py::arg("node"), py::arg("lexemes"), py::arg("meter"))
        .def(
            "waiting",
            [](CFGCore& c, const NodeRef& node) {
                py::dict out;
                node_given(node);
                for (const Item& item : node->items) {
                    int32_t sym = c.parser().rules().next_sym[size_t(item.dotted)];
                    if (sym < 0) continue;
                    py::object origin = py::none();
                    if (item.origin) origin = py::cast(item.origin->shared_from_this());
                    py::object key = py::cast(sym);
                    if (!out.contains(key)) out[key] = py::list();
                    out[key].cast<py::list>().append(py::make_tuple(item.dotted, origin));
                }
                return out;
            },
            py::arg("node"), "The node's items grouped by the nonterminal after their dot.")
        .def(
            "start_of",
            [](CFGCore& c, const NodeRef& node) {
                Hold hold(c.lexer());
                return c.start_of(*node_given(node));
            },
            py::arg("node"))
        .def(
            "end",
            [](CFGCore& c, const NodeRef& node, int32_t tag, Meter& meter) {
                Hold hold(c.lexer());
                if (tag < 0 || size_t(tag) >= c.lexer().n_tags())
                    throw py::value_error("tag out of range");
                return c.end(node_given(node), tag, meter);
            },
            py::arg("node"), py::arg("tag"), py::arg("meter"))
        .def(
            "step",
            [](CFGCore& c, NodeRef node, int32_t s, const py::bytes& data,
               Meter& meter) -> py::object {
                Hold hold(c.lexer());
                node_given(node);
                lexer_state_given(c, s);
                std::string_view text = data;
                if (!c.step(node, s, reinterpret_cast<const uint8_t*>(text.data()), text.size(),
                            meter))
                    return py::none();
                return py::make_tuple(node, s);
            },
            py::arg("node"), py::arg("s"), py::arg("data"), py::arg("meter"),
            "The state after `data`, or None once no continuation is in the language.")
        .def(
            "tokens",
            [](CFGCore& c, const NodeRef& node, int32_t s, const Trie& trie, PieceCache& cache,
               Meter& meter) {
                Hold hold(c.lexer());
                node_given(node);
                lexer_state_given(c, s);
                std::vector<int32_t> out;
                c.walk(node, s, trie, SliceFilter{}, cache, meter, [&](const Piece& found) {
                    found.each_token(trie, [&out](int32_t t) { out.push_back(t); });
                });
                return to_array(std::move(out));
            },
            py::arg("node"), py::arg("s"), py::arg("trie"), py::arg("cache"), py::arg("meter"),
            "The tokens whose bytes keep the state live (repeats possible).");
}

}  // namespace

PYBIND11_MODULE(native, m) {
    m.doc() = "The native engine core: the lexer's product DFA, the vocabulary trie walks, JSON key checks.";
    // the module attribute keeps the type alive for the translator below
    static PyObject* limit_type = py::exception<LexerLimit>(m, "LexerLimit").ptr();
    static PyObject* out_of_fuel = py::exception<OutOfFuel>(m, "OutOfFuel").ptr();
    py::register_exception_translator([](std::exception_ptr p) {
        try {
            if (p) std::rethrow_exception(p);
        } catch (const OutOfFuel& e) {
            PyErr_SetString(out_of_fuel, e.what());
        } catch (const LexerLimit& e) {
            py::object err = py::reinterpret_borrow<py::object>(limit_type)(py::str(e.what()));
            err.attr("lexemes") = py::cast(e.lexemes);
            PyErr_SetObject(limit_type, err.ptr());
        }
    });

    py::class_<Trie, std::shared_ptr<Trie>>(m, "Trie")
        .def(py::init(&trie_from), py::arg("trie"));

    m.def(
        "trie_arrays",
        [](const TokenTexts& texts, int64_t n_ids) {
            TrieArrays a;
            {
                py::gil_scoped_release free;
                a = build_trie(texts, n_ids);
            }
            return py::make_tuple(to_array(std::move(a.byte)), to_array(std::move(a.depth)),
                                  to_array(std::move(a.parent)), to_array(std::move(a.subtree_end)),
                                  to_array(std::move(a.child_start)),
                                  to_array(std::move(a.children)),
                                  to_array(std::move(a.token_start)), to_array(std::move(a.tokens)),
                                  to_array(std::move(a.node_of_token)));
        },
        py::arg("texts"), py::arg("n_ids"),
        "A TokenTrie's arrays (byte, depth, parent, subtree_end, child_start, children, "
        "token_start, tokens, node_of_token) from every id's bytes, as TokenTrie.build.");

    py::class_<DFATable>(m, "DFATable")
        .def(py::init([](const Array<int32_t>& table, const Array<uint8_t>& classes) {
                 if (table.ndim() != 2 || table.shape(1) < 1 || table.shape(1) > 256)
                     throw py::value_error("a DFA table must be (n, k) with 1 <= k <= 256");
                 if (classes.ndim() != 1 || classes.shape(0) != 256)
                     throw py::value_error("a DFA's byte classes must be 256 entries");
                 DFATable out;
                 out.next = to_vector(table);
                 out.n_states = table.shape(0);
                 out.n_classes = int32_t(table.shape(1));
                 for (int b = 0; b < 256; ++b) {
                     const uint8_t c = classes.data()[b];
                     if (c >= out.n_classes)
                         throw py::value_error("a byte class outside the table");
                     out.classes[size_t(b)] = c;
                 }
                 for (int32_t t : out.next)
                     if (t < 0 || t >= out.n_states)
                         throw py::value_error("a transition leads outside the table");
                 return out;
             }),
             py::arg("table"), py::arg("classes"))
        .def(
            "tokens",
            [](const DFATable& dfa, const Trie& trie, int32_t state) {
                if (state < 0 || state >= dfa.n_states) throw py::value_error("state out of range");
                return to_array(walk_dfa(trie, dfa, state));
            },
            py::arg("trie"), py::arg("state"),
            "The tokens whose bytes lead from `state` to a live state (a trie walk).")
        .def(
            "admits",
            [](const DFATable& dfa, int32_t state, const DFATable& language, int32_t start) {
                if (state < 0 || state >= dfa.n_states) throw py::value_error("state out of range");
                if (start < 0 || start >= language.n_states)
                    throw py::value_error("language start out of range");
                return admits([&dfa](int32_t q, uint8_t b) { return dfa.at(q, b); }, state,
                              language, start);
            },
            py::arg("state"), py::arg("language"), py::arg("language_start"),
            "Whether every string of `language` keeps this DFA live from `state`.");

    py::class_<Lexer, std::shared_ptr<Lexer>>(m, "Lexer")
        .def(py::init([](const Array<int64_t>& classes, int n_joint, const py::list& lexemes,
                         size_t max_states) {
                 if (classes.size() != 256) throw py::value_error("classes must have 256 entries");
                 std::array<int32_t, 256> cls{};
                 for (int b = 0; b < 256; ++b) {
                     cls[size_t(b)] = int32_t(classes.data()[b]);
                     if (cls[size_t(b)] < 0 || cls[size_t(b)] >= n_joint)
                         throw py::value_error("byte class out of range");
                 }
                 std::vector<LexemeDFA> dfas;
                 for (const auto& spec : lexemes) {
                     dfas.push_back(lexeme_from(spec.cast<py::tuple>()));
                     if (dfas.back().own_of_joint.size() != size_t(n_joint))
                         throw py::value_error("own classes must cover every joint class");
                     for (int owner : dfas.back().owners)
                         if (owner < 0 || size_t(owner) >= size_t(py::len(lexemes)))
                             throw py::value_error("keyword owner out of range");
                 }
                 return std::make_shared<Lexer>(cls, n_joint, std::move(dfas), max_states);
             }),
             py::arg("classes"), py::arg("n_joint"), py::arg("lexemes"), py::arg("max_states"))
        .def_property_readonly("n_states", [](const Lexer& lx) { Hold h(lx); return lx.n_states(); })
        .def_property_readonly("n_tags", [](const Lexer& lx) { Hold h(lx); return lx.n_tags(); })
        .def_property_readonly(
            "nbytes",
            [](const Lexer& lx) {
                Hold hold(lx);
                return kSharedBlockBytes + sizeof(Lexer) + lx.heap_bytes();
            },
            "Heap bytes it holds: the lexemes' DFAs and the product's states, rows and tags.")
        .def(
            "start_of",
            [](Lexer& lx, const std::vector<int>& lexemes) {
                Hold hold(lx);
                return lx.start_of(lexemes);
            },
            py::arg("lexemes"))
        .def(
            "row",
            [](Lexer& lx, int32_t state) {
                Hold hold(lx);
                if (state < 0 || size_t(state) >= lx.n_states())
                    throw py::value_error("state out of range");
                const int32_t* row = lx.row(state);
                std::vector<int32_t> out(256);
                for (int b = 0; b < 256; ++b) out[size_t(b)] = row[lx.classes()[size_t(b)]];
                return to_array(std::move(out));
            },
            py::arg("state"), "The next state at each of the 256 bytes (int32).")
        .def(
            "tag_of",
            [](const Lexer& lx, int32_t state) {
                Hold hold(lx);
                if (state < 0 || size_t(state) >= lx.n_states())
                    throw py::value_error("state out of range");
                return lx.tag(state);
            },
            py::arg("state"))
        .def(
            "tag_set",
            [](const Lexer& lx, int32_t tag) {
                Hold hold(lx);
                if (tag < 0 || size_t(tag) >= lx.n_tags()) throw py::value_error("tag out of range");
                return lx.tag_set(tag);
            },
            py::arg("tag"))
        .def(
            "ends_before",
            [](const Lexer& lx, int32_t tag) {
                Hold hold(lx);
                if (tag < 0 || size_t(tag) >= lx.n_tags()) throw py::value_error("tag out of range");
                std::vector<uint8_t> out(256);
                for (int b = 0; b < 256; ++b) out[size_t(b)] = lx.can_end(tag, uint8_t(b));
                return to_array(std::move(out));
            },
            py::arg("tag"))
        .def(
            "key",
            [](const Lexer& lx, int32_t state) {
                Hold hold(lx);
                if (state < 0 || size_t(state) >= lx.n_states())
                    throw py::value_error("state out of range");
                return lx.key(state);
            },
            py::arg("state"))
        .def(
            "walk",
            [](Lexer& lx, const Trie& trie, int32_t state, const Array<int64_t>& starts,
               bool end_at_start) {
                Hold hold(lx);
                if (state <= 0 || size_t(state) >= lx.n_states())
                    throw py::value_error("state out of range");
                std::vector<int64_t> roots = to_vector(starts);
                for (int64_t r : roots)
                    if (r <= 0 || size_t(r) >= trie.n_nodes())
                        throw py::value_error("start node out of range");
                Piece piece = walk_lexer(lx, trie, state, roots, end_at_start);
                py::list ends;
                for (auto& [tag, nodes] : piece.ends)
                    ends.append(py::make_tuple(tag, to_array(std::move(nodes))));
                std::vector<int32_t> tokens;
                piece.each_token(trie, [&tokens](int32_t t) { tokens.push_back(t); });
                return py::make_tuple(to_array(std::move(tokens)), ends);
            },
            py::arg("trie"), py::arg("state"), py::arg("starts"), py::arg("end_at_start"))
        .def(
            "admits",
            [](Lexer& lx, int32_t state, const DFATable& language, int32_t start,
               size_t max_pairs) {
                Hold hold(lx);
                if (state <= 0 || size_t(state) >= lx.n_states())
                    throw py::value_error("state out of range");
                if (start < 0 || start >= language.n_states)
                    throw py::value_error("language start out of range");
                return admits([&lx](int32_t q, uint8_t b) { return lx.next(q, b); }, state,
                              language, start, max_pairs);
            },
            py::arg("state"), py::arg("language"), py::arg("language_start"),
            py::arg("max_pairs") = 0,
            "Whether every string of `language` keeps the lexer live from `state` (inside the "
            "lexemes in progress, no boundary).")
        .def(
            "lexeme_admits",
            [](Lexer& lx, int lexeme, int32_t at, const DFATable& language, int32_t start,
               size_t max_pairs) {
                Hold hold(lx);
                if (lexeme < 0 || size_t(lexeme) >= lx.n_lexemes())
                    throw py::value_error("lexeme out of range");
                LexemeDFA& dfa = lx.lexeme(lexeme);
                if (at <= 0 || size_t(at) >= dfa.n_states())
                    throw py::value_error("lexeme state out of range");
                if (start < 0 || start >= language.n_states)
                    throw py::value_error("language start out of range");
                const auto& classes = lx.classes();
                return admits(
                    [&](int32_t q, uint8_t b) {
                        return dfa.next(q, dfa.own_of_joint[size_t(classes[b])]);
                    },
                    at, language, start, max_pairs);
            },
            py::arg("lexeme"), py::arg("at"), py::arg("language"), py::arg("language_start"),
            py::arg("max_pairs") = 0,
            "Whether every string of `language` keeps one lexeme's DFA live from state `at`.");

    bind_cfg(m);

    bind_texts(m);
    bind_key_check(m);
}
