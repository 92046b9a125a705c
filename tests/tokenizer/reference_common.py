"""Shared by make_smollm2_reference.py and make_gemma3_reference.py: the text cases both
tokenizers are checked on (each script inserts its own cases between these groups, in the order
its checked-in JSON holds them), the GGUF field readers (the `gguf` package, not flashnorm), the
random-text generator and the chat-message list."""

import json
import random

import jinja2

# ASCII words, case, punctuation
ASCII_CASES = [
    "Hello world",
    "Hello, world!",
    "hello",
    " hello",
    "HELLO WORLD",
    "The quick brown fox jumps over the lazy dog.",
    "a",
    " ",
    "",
    "!!!",
    "...???!!!",
    "Wait... what?! (really) [yes] {no} <maybe>",
    "foo_bar-baz/qux\\quux",
    "C'est la vie; \"quoted\" 'single'",
    "@user #hashtag $100 50% a&b *star* ~tilde~ `code` ^caret |pipe|",
]

# digits and numbers
DIGIT_CASES = [
    "1",
    "12",
    "123456789012345678901234567890",
    "3.14159",
    "In 2024, 1,000,000 people paid $1.5e10.",
    "abc123def",
    " 42 ",
    "v1.2.3-rc4",
    "\u0661\u0662\u0663 Arabic-Indic digits, \u00bd half, \u2167 roman eight",
]

# the end of the whitespace cases: CR LF, mixed runs, Unicode spaces, control characters
WHITESPACE_CASES_TAIL = [
        "\r\nwindows\r\nline\r\n",
        "mixed \t \n whitespace \n\t ",
        "a  b   c    d",
        "end with newline\n",
        "\u00a0non-breaking\u00a0space and\u3000ideographic space",
        "x \u0085y x \u2028y x \u000by x \u180ey x \u001cy x \u200by x \u202fy",
        "control chars \u0000\u0001\u0007\u001b[0m \u007f end",
]

# accented Latin, other scripts
SCRIPT_CASES = [
    "caf\u00e9 na\u00efve r\u00e9sum\u00e9 \u00fcber Stra\u00dfe",
    "cafe\u0301 (combining accent)",
    "\u00c5ngstr\u00f6m, \u0141\u00f3d\u017a, \u0219i \u021b",
    "\u039a\u03b1\u03bb\u03b7\u03bc\u03ad\u03c1\u03b1 \u03ba\u03cc\u03c3\u03bc\u03b5",
    "\u041f\u0440\u0438\u0432\u0435\u0442, \u043c\u0438\u0440! \u041a\u0430\u043a \u0434\u0435\u043b\u0430?",
    "\u4f60\u597d\uff0c\u4e16\u754c\uff01",
    "\u65e5\u672c\u8a9e\u306e\u30c6\u30ad\u30b9\u30c8\u3067\u3059\u3002",
    "\ud55c\uad6d\uc5b4 \ud14d\uc2a4\ud2b8",
    "\u0645\u0631\u062d\u0628\u0627 \u0628\u0627\u0644\u0639\u0627\u0644\u0645",
    "\u0928\u092e\u0938\u094d\u0924\u0947 \u0926\u0941\u0928\u093f\u092f\u093e",
    "\u05e9\u05dc\u05d5\u05dd \u05e2\u05d5\u05dc\u05dd",
]

# emoji
EMOJI_CASES = [
    "\U0001F600",
    "I love \U0001F355 and \U0001F680!",
    "\U0001F468\u200D\U0001F469\u200D\U0001F467\u200D\U0001F466 family",
    "\U0001F3F3\uFE0F\u200D\U0001F308 flag, \U0001F44D\U0001F3FD thumbs",
    "\U0001F1E9\U0001F1EA\U0001F1EF\U0001F1F5",
]

MATH_CASE = "math: \u2200x \u2208 \u211d, x\u00b2 \u2265 0 \u2192 \u221e"

# code: the first four cases, then the rest (the Gemma 3 script puts HTML tags between them)
CODE_CASES_HEAD = [
    "def foo(x):\n    return x * 2\n",
    "int main() {\n\tprintf(\"%d\\n\", 42);\n\treturn 0;\n}",
    "for (size_t i = 0; i < n; ++i) { a[i] += b[i]; }",
    "<html><body class=\"x\">Hi &amp; bye</body></html>",
]
CODE_CASES_TAIL = [
    '{"key": [1, 2.5, null, true], "nested": {"a": "b"}}',
    "SELECT * FROM users WHERE id = 10 AND name LIKE '%bob%';",
    "x = [i**2 for i in range(10) if i % 3 == 0]  # comment",
    "https://example.com/path?query=1&x=y#frag",
    "    indented code\n        more indented\n",
]

# long words, repetitions
LONG_CASES = [
    "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa",
    "supercalifragilisticexpialidocious antidisestablishmentarianism",
    "==========------------__________",
    "\u00e9\u00e9\u00e9\u00e9\u00e9\u00e9\u00e9\u00e9 \u00df\u00df\u00df",
]

# The start of both random-text pools: ASCII of every class, then characters of other scripts.
RANDOM_POOL_BASE = (list("aAzZeE  \t\n\r'sdtmlvr0123456789.,;:!?-_()[]{}<>/\\\"@#$%^&*+=|~`")
                    + ["\u00e9", "\u00df", "\u00a0", "\u0085", "\u3000", "\u2028", "\u0661",
                       "\u00bd", "\u4e2d", "\u6587", "\u3042", "\u0416", "\u03a9", "\u05d0",
                       "\u0301"])

CHAT_CASES = [
    {"user": "Hello!", "system": None},
    {"user": "What is the capital of France?", "system": "You are a geography tutor."},
    {"user": "multi\nline\n\nquestion", "system": None},
    {"user": "", "system": ""},
]


def field_strings(reader, key):
    """The string array `key` of a gguf.GGUFReader."""
    f = reader.fields[key]
    return [bytes(f.parts[i]).decode("utf-8") for i in f.data]


def field_numbers(reader, key, conv):
    """The numeric array `key` of a gguf.GGUFReader, each element through `conv`."""
    f = reader.fields[key]
    return [conv(f.parts[i][0]) for i in f.data]


def random_texts(pool, seed, count):
    """`count` strings of 1..30 elements drawn from `pool` (random.Random(seed))."""
    rng = random.Random(seed)
    return ["".join(rng.choice(pool) for _ in range(rng.randint(1, 30))) for _ in range(count)]


def chat_messages(case):
    """The message list of a chat case: its system message (when not None), then the user's."""
    messages = []
    if case["system"] is not None:
        messages.append({"role": "system", "content": case["system"]})
    messages.append({"role": "user", "content": case["user"]})
    return messages


def render_chats(template, cases, **variables):
    """Renders the Jinja chat template `template` (source text) for each chat case, with
    add_generation_prompt and the extra template `variables`; returns (case, prompt) pairs."""
    tmpl = jinja2.Environment().from_string(template)
    return [(c, tmpl.render(messages=chat_messages(c), add_generation_prompt=True, **variables))
            for c in cases]


def read_gpl3():
    """The GPL-3 text every Debian machine carries (the long-text case)."""
    with open("/usr/share/common-licenses/GPL-3", encoding="utf-8") as fh:
        return fh.read()


def write_reference(out_path, generator, versions, cases, random_cases, no_special, rest):
    """Writes the reference JSON (one line, ASCII): the generator, the outside libraries' versions
    (dict), the three id sections, then the script's own sections `rest` (dict), in that order."""
    out = {"generator": generator, **versions, "cases": cases, "random_cases": random_cases,
           "no_special_cases": no_special, **rest}
    with open(out_path, "w", encoding="utf-8") as fh:
        json.dump(out, fh, ensure_ascii=True, indent=None)
        fh.write("\n")
