"""Score hostile test corpora with verl v0.9.0's own reward functions (the oracle for FlowRL's ports).

This script holds the corpora (the cases are defined in code below, each with a `note` on what it
probes) and, given a copy of verl's `verl/utils/reward_score` directory, scores every case with
verl's Python code and writes the fixtures the TypeScript differential test reads:

    test/fixtures/verl-rewards/gsm8k.jsonl        gsm8k.compute_score(response, ground_truth, **options)
    test/fixtures/verl-rewards/math_reward.jsonl  math_reward.compute_score(response, ground_truth)
    test/fixtures/verl-rewards/math_dapo.jsonl    math_dapo.compute_score(response, ground_truth, **options)
    test/fixtures/verl-rewards/prime_code.jsonl   prime_code.compute_score(response, ground_truth, continuous=True)[0]

No verl code is kept in this repository; to rerun:

    git clone https://github.com/verl-project/verl /tmp/verl-src
    mkdir -p /tmp/verl090
    git -C /tmp/verl-src archive v0.9.0 verl/utils/reward_score | tar -x -C /tmp/verl090
    /usr/bin/python3 scripts/verl_reward_oracle.py --verl /tmp/verl090/verl/utils/reward_score

(run from the repository root; Debian's python3 3.11 with python3-numpy; takes about a minute, 20 s of it two deliberate timeouts).
Each scorer file is loaded by path with importlib, so verl's package __init__ (torch etc.) is never
imported; prime_code is loaded as a package so its relative import of .utils works.

prime_code runs the programs in the corpus unsandboxed on this host (in a forked child, as verl
does); every program here is benign and fast, except two deliberate infinite loops that verl's
alarm kills (about 15 s and 5 s). Two environment facts that verl's result depends on are pinned:
multiprocessing uses "fork" (verl's default on Linux before Python 3.14), and file descriptor 0 is
/dev/null while scoring (verl's harness leaves `open` bound to the real builtin, so `open(0).read()`
reads the worker's own stdin, not the test input).

`want` in a case is the author's expectation of verl's score; it is not written to the fixtures.
Cases where verl differs from `want` are listed on stderr (none when this script was last run).
"""

import argparse
import contextlib
import importlib.util
import io
import json
import multiprocessing
import os
import sys
import time

# ---------------------------------------------------------------------------------------------
# Shared text
# ---------------------------------------------------------------------------------------------

# Filler prose without digits, '.', ',', '-', '#', '$' or "Answer" (so it adds nothing to any regex).
FILL = "and so we keep going with the reasoning while checking each step again "


def filler(n):
    """n characters of neutral filler text."""
    s = FILL * (n // len(FILL) + 1)
    return s[:n]


EMOJI = "\U0001F600"  # one code point, two UTF-16 units
MATH_EMOJI = "\U0001D465"  # MATHEMATICAL ITALIC SMALL X, also outside the BMP

# GSM8K-style chains of thought (from the GSM8K training set's solutions).
NATALIA = "Natalia sold 48/2 = 24 clips in May.\nNatalia sold 48+24 = 72 clips altogether in April and May.\n"
WENG = "Weng earns 12/60 = $0.2 per minute.\nWorking 50 minutes, she earned 0.2 x 50 = $10.\n"
BETTY = (
    "In the beginning, Betty has only 100 / 2 = $50.\nBetty's grandparents gave her 15 * 2 = $30.\n"
    "This means, Betty needs 100 - 50 - 30 - 15 = $5 more.\n"
)
MAILA = (
    "Maila read 12 x 2 = 24 pages today.\nSo she was able to read a total of 12 + 24 = 36 pages since yesterday.\n"
    "There are 120 - 36 = 84 pages left to be read.\n"
    "Since she wants to read half of the remaining pages tomorrow, then she should read 84/2 = 42 pages.\n"
)
JAMES = "He writes each friend 3*2=6 pages a week\nSo he writes 6*2=12 pages every week\nThat means he writes 12*52=624 pages a year\n"
THINK = "Let's think step by step.\n"

# A MATH-style chain of thought with no boxed answer, no "Answer:" and no '$'.
MATH_COT = (
    "We first simplify the expression. Multiplying both sides by the denominator gives a linear equation, "
    "and collecting like terms we can solve for the unknown.\n"
)


# ---------------------------------------------------------------------------------------------
# GSM8K
# ---------------------------------------------------------------------------------------------


def gsm8k_cases():
    cases = []

    def case(note, response, gt, want=None, **options):
        cases.append({"note": note, "response": response, "ground_truth": gt, "options": options, "want": want})

    def both(note, response, gt, strict, flexible, **options):
        """The same response under the default (strict) method and under method="flexible"."""
        case("strict: " + note, response, gt, strict, **options)
        case("flexible: " + note, response, gt, flexible, method="flexible", **options)

    F = {"format_score": 0.1}
    both("GSM8K-style solution ending '#### 72'", THINK + NATALIA + "#### 72", "72", 1, 1)
    both("'#### 72' followed by a newline", NATALIA + "#### 72\n", "72", 1, 1)
    both("'####72' without the space the strict regex needs", NATALIA + "####72", "72", 0, 1)
    both("wrong final answer", NATALIA + "#### 71", "72", 0, 0)
    both("wrong final answer, format_score 0.1", NATALIA + "#### 71", "72", 0.1, 0.1, **F)
    both("'#### 10' with dollar amounts earlier", WENG + "#### 10", "10", 1, 1)
    both("'#### $10': '$' right after '#### '", WENG + "#### $10", "10", 0, 1, **F)
    both("'#### 10.00' vs '10'", WENG + "#### 10.00", "10", 0.1, 0.1, **F)
    both("betty '#### 5'", BETTY + "#### 5", "5", 1, 1)
    both("maila '#### 42'", MAILA + "#### 42", "42", 1, 1)
    both("answer sentence ending with a period", MAILA + "The answer is 42.", "42", 0, 0.1, **F)
    both("answer sentence without a period", MAILA + "The answer is 42", "42", 0, 1, **F)
    both("james '#### 624'", JAMES + "#### 624", "624", 1, 1)
    both("'#### 1,234' vs '1234' (strict drops commas)", "So the total is 1,234.\n#### 1,234", "1234", 1, 0.1, **F)
    both("'#### 1,234' vs ground truth '1,234'", "#### 1,234", "1,234", 0.1, 1, **F)
    both("'#### -3' negative", "The temperature fell to -3 degrees.\n#### -3", "-3", 1, 1)
    both("'#### - 3' with a space after the minus", "#### - 3", "-3", 0, 0.1, **F)
    both("'#### 3.50' vs '3.5'", "Each costs $3.50.\n#### 3.50", "3.5", 0.1, 0.1, **F)
    both("'#### 3.5' vs '3.5'", "#### 3.5", "3.5", 1, 1)
    both("two '####' lines, the last is right", "#### 12\nWait, I made an error.\n#### 72", "72", 1, 1)
    both("two '####' lines, the last is wrong", "#### 72\nWait, let me redo this.\n#### 12", "72", 0.1, 0.1, **F)
    both("'#### 72.' with a trailing period", NATALIA + "#### 72.", "72", 0.1, 0.1, **F)
    both("'####  72' with two spaces", NATALIA + "####  72", "72", 0, 1, **F)
    both("'#### +72' with a plus sign", "#### +72", "72", 0, 1, **F)
    both("'#### ,72' leading comma (strict removes commas)", "#### ,72", "72", 1, 0.1, **F)
    both("'#### 7,2' comma inside", "#### 7,2", "72", 1, 0.1, **F)
    both("'#### 0072' leading zeros", "#### 0072", "72", 0.1, 0.1, **F)
    both("'#### 72 clips' with a unit word", NATALIA + "#### 72 clips", "72", 1, 1)
    both("sign-off sentence after '#### 72'", NATALIA + "#### 72\nI hope this helps! Let me know if you have other questions.", "72", 1, 1)
    both("a later sentence with a step number", NATALIA + "#### 72\nStep 1 was the hardest.", "72", 1, 0.1, **F)
    both("'72 ...' ellipsis after the number", "The answer is 72 ...", "72", 0, 0.1, **F)
    both("'72...' ellipsis glued to the number", "The answer is 72...", "72", 0, 0.1, **F)
    both("only a sentence period, format_score 0.1", "I am not sure about this one.", "72", 0, 0.1, **F)
    both("only a comma in the response", "Hello, world", "72", 0, 0.1, **F)
    both("empty response", "", "72", 0, 0, **F)
    both("no digits at all", "I cannot solve this problem", "72", 0, 0, **F)
    both("'####' with nothing after it", "####", "72", 0, 0, **F)
    both("Arabic-Indic digits after '#### '", "#### \u0667\u0662", "72", 0, 0, **F)
    both("U+2212 minus sign before the number", "#### \u22123", "-3", 0, 0.1, **F)
    both("'$72' in text", "She paid $72", "72", 0, 1)
    both("'x = 72 .' period separated by a space", "x = 72 .", "72", 0, 1)
    both("'1.' as the final token", "The number of apples left is 1.", "1", 0, 0.1, **F)
    both("'1,2,3' list of numbers", "The numbers are 1,2,3", "3", 0, 0.1, **F)
    both("'3-4' reads as '3' and '-4'", "The change is 3-4", "-4", 0, 1)
    both("CRLF line endings", NATALIA.replace("\n", "\r\n") + "#### 72\r\n", "72", 1, 1)
    both("tab instead of the space", "####\t72", "72", 0, 1)
    both("no-break space instead of the space", "####\u00a072", "72", 0, 1)
    both("markdown bold '**#### 72**'", NATALIA + "**#### 72**", "72", 1, 1)
    both("boxed answer, no '####'", NATALIA + "\\boxed{72}", "72", 0, 1)
    both("ground truth with a trailing space", "#### 72", "72 ", 0.1, 0.1, **F)
    both("negative answer in text", "The balance is -72", "-72", 0, 1)
    both("'#### 1,234.' comma and period", "#### 1,234.", "1234", 0.1, 0.1, **F)
    both("'#### 5,,,' trailing commas", "#### 5,,,", "5", 1, 0.1, **F)
    both("'#### ,,,' only commas (strict answer becomes '')", "#### ,,,", "5", 0.1, 0.1, **F)
    both("'#### .' only a period", "#### .", "5", 0.1, 0.1, **F)
    both("newline between '####' and the number", "####\n72", "72", 0, 1)
    both("'# 72' single hash", "# 72", "72", 0, 1)
    both("two '####' on one line", "#### 72 and #### 73", "73", 1, 1)
    both("'#### 72 #### ' second marker without a number", "#### 72 #### ", "72", 1, 1)
    both("'##### 72' five hashes", "##### 72", "72", 1, 1)
    both("'#### 7 2' space inside the number", "#### 7 2", "72", 0.1, 0.1, **F)
    both("'#### 72%' percent sign", "#### 72%", "72", 1, 1)
    both("'#### 72$' dollar after", "#### 72$", "72", 1, 1)
    both("'#### 72.0' vs '72'", "#### 72.0", "72", 0.1, 0.1, **F)
    both("'#### .5' vs '0.5'", "#### .5", "0.5", 0.1, 0.1, **F)
    both("'#### 1e3' vs '1000'", "#### 1e3", "1000", 0.1, 0.1, **F)
    both("'#### 1.2.3' several periods", "#### 1.2.3", "1.2.3", 1, 1)

    # score / format_score options
    case("score=2.0 on a correct answer", NATALIA + "#### 72", "72", 2.0, score=2.0)
    case("score=2.0, format_score=0.5 on a wrong answer", NATALIA + "#### 70", "72", 0.5, score=2.0, format_score=0.5)
    case("format_score=0.5 but no answer at all (returns 0)", NATALIA, "72", 0, format_score=0.5)
    case("explicit method='strict', score=0.5", NATALIA + "#### 72", "72", 0.5, method="strict", score=0.5)
    case("flexible, score=-1 and format_score=-0.5 on a wrong answer", "The answer is 70", "72", -0.5, method="flexible", score=-1.0, format_score=-0.5)
    case("flexible, score=-1 on a correct answer", "The answer is 72", "72", -1.0, method="flexible", score=-1.0, format_score=-0.5)

    # the 300-character clip (code points)
    long_tail = NATALIA + "#### 72\n" + filler(320)
    both("'#### 72' then 320 chars of text (clipped away; the filler has no numbers)", long_tail, "72", 0, 0, **F)
    both("'#### 72' early, '#### 71' in the last 300 chars", "#### 72\n" + filler(400) + "\n#### 71", "72", 0.1, 0.1, **F)
    both("3000-char response ending '#### 72'", filler(3000) + "\n#### 72", "72", 1, 1)
    s300 = "#### 72 " + filler(292)
    both("exactly 300 chars, '#### 72' at index 0 (not clipped)", s300, "72", 1, 1)
    s301 = "#### 72 " + filler(293)
    both("301 chars, the first '#' is clipped", s301, "72", 0, 1)
    s301b = "##### 72 " + filler(292)
    both("301 chars with '#####': clipping one '#' leaves '#### 72'", s301b, "72", 1, 1)
    # Emoji after the answer: in code points '#### 72' is inside the last 300; in UTF-16 units it is not.
    tail = " " + EMOJI * 50 + filler(200)
    emoji_resp = filler(200) + "#### 72" + tail
    both("50 emoji after '#### 72': inside 300 code points, outside 300 UTF-16 units", emoji_resp, "72", 1, 1)
    emoji_resp2 = filler(200) + "#### 72" + " " + EMOJI * 146 + "!!"
    both("146 emoji after '#### 72': 156 code points from the first '#', 302 UTF-16 units", emoji_resp2, "72", 1, 1)
    emoji_resp3 = EMOJI * 30 + filler(100) + "#### 72 " + EMOJI * 10 + filler(50)
    both("emoji before the answer, response under 300 code points", emoji_resp3, "72", 1, 1)
    emoji_resp4 = filler(100) + "#### 72" + "x" + EMOJI * 296
    both("'#### 72x' then 296 emoji: the last 300 code points start at ' 72x'", emoji_resp4, "72", 0, 1, **F)
    emoji_resp5 = filler(100) + "#### 7" + EMOJI * 298
    both("'#### 7' then 298 emoji: cp window keeps ' 7', strict misses", emoji_resp5, "7", 0, 1, **F)
    both("math italic x (non-BMP) before '#### 72'", MATH_EMOJI * 120 + " = 72\n#### 72", "72", 1, 1)
    both("emoji in the chain of thought", "I have 3 \U0001F34E and 4 \U0001F34C, so 3 + 4 = 7.\n#### 7", "7", 1, 1)
    return cases


# ---------------------------------------------------------------------------------------------
# Answer forms shared by math_reward (inside \boxed{}) and math_dapo (after "Answer:")
# (note, prediction, ground truth, want math_reward, want math_dapo score)
# ---------------------------------------------------------------------------------------------

FORMS = [
    ("integer", "5", "5", 1, 1),
    ("wrong integer", "6", "5", 0, -1),
    ("negative integer", "-7", "-7", 1, 1),
    ("negative with a space after the minus", "- 7", "-7", 1, 1),
    ("\\frac with braces", r"\frac{1}{2}", r"\frac{1}{2}", 1, 1),
    ("\\frac12 shorthand", r"\frac12", r"\frac{1}{2}", 1, 1),
    ("\\dfrac vs \\frac", r"\dfrac{1}{2}", r"\frac{1}{2}", 1, -1),
    ("\\tfrac12 shorthand", r"\tfrac12", r"\frac{1}{2}", 1, -1),
    ("a/b vs \\frac", "1/2", r"\frac{1}{2}", 1, -1),
    ("0.5 vs \\frac{1}{2}", "0.5", r"\frac{1}{2}", 1, -1),
    (".5 vs \\frac{1}{2}", ".5", r"\frac{1}{2}", 1, -1),
    ("0.50 vs \\frac{1}{2}", "0.50", r"\frac{1}{2}", 0, -1),
    ("-3/4 vs -\\frac{3}{4}", "-3/4", r"-\frac{3}{4}", 0, -1),
    ("\\frac{-3}{4} vs ground truth -3/4", r"\frac{-3}{4}", "-3/4", 1, -1),
    ("\\frac1{2} half shorthand", r"\frac1{2}", r"\frac{1}{2}", 1, -1),
    ("\\frac{1}2 other half shorthand", r"\frac{1}2", r"\frac{1}{2}", 0, -1),
    ("\\frac 1 2 with spaces", r"\frac 1 2", r"\frac{1}{2}", 1, 1),
    ("\\frac{3}{4} vs ground truth 3/4", r"\frac{3}{4}", "3/4", 1, -1),
    ("03/4 leading zero", "03/4", r"\frac{3}{4}", 0, -1),
    ("\\left( \\right) pair", r"\left( 1, 2 \right)", "(1,2)", 1, -1),
    ("interval with spaces", "[1, 2)", "[1,2)", 1, 1),
    ("50\\% vs 50", r"50\%", "50", 1, -1),
    ("50% (no backslash) vs 50", "50%", "50", 0, -1),
    ("50 vs ground truth 50\\%", "50", r"50\%", 1, -1),
    ("12.5\\% vs 12.5", r"12.5\%", "12.5", 1, -1),
    ("30^\\circ vs 30", r"30^\circ", "30", 1, 1),
    ("30^{\\circ} vs 30", r"30^{\circ}", "30", 1, 1),
    ("30 degree sign (U+00B0)", "30\u00b0", "30", 0, -1),
    ("30 degrees (word)", "30 degrees", "30", 0, 1),
    ("5\\text{ cm} unit", r"5\text{ cm}", "5", 1, 1),
    ("5\\text{cm} unit without the space", r"5\text{cm}", "5", 0, 1),
    ("5\\text{ cm}^2", r"5\text{ cm}^2", "5", 1, 1),
    ("two '\\text{ ' (remove_right_units asserts)", r"5\text{ cm}\text{ long}", "5", 0, -1),
    ("two '\\text{ ', identical ground truth (raw compare)", r"2\text{ m}\text{ by }3", r"2\text{ m}\text{ by }3", 1, 1),
    ("5\\mbox{ cm}", r"5\mbox{ cm}", "5", 0, 1),
    ("10 inches (word)", "10 inches", "10", 0, 1),
    ("12 vs ground truth 12\\text{ inches}", "12", r"12\text{ inches}", 1, 1),
    ("3\\text{ hours}", r"3\text{ hours}", "3", 1, 1),
    ("60 mph", "60 mph", "60", 0, 1),
    ("16 square units", "16 square units", "16", 0, 1),
    ("50 cents", "50 cents", "50", 0, 1),
    ("\\$10", r"\$10", "10", 1, 1),
    ("$10 (bare dollar)", "$10", "10", 0, 1),
    ("5 vs ground truth \\$5", "5", r"\$5", 1, 1),
    ("\\$1,000 vs 1000", r"\$1,000", "1000", 0, 1),
    ("1,000 vs 1000", "1,000", "1000", 0, 1),
    ("1000 vs ground truth 1,000", "1000", "1,000", 0, 1),
    ("1{,}000 vs 1000", "1{,}000", "1000", 0, 1),
    ("1\\,000 thin space", r"1\,000", "1000", 0, -1),
    ("10\\!000 negative space", r"10\!000", "10000", 1, -1),
    ("-1,000 vs -1000", "-1,000", "-1000", 0, -1),
    ("x = 5", "x = 5", "5", 1, 1),
    ("k=3", "k=3", "3", 1, 1),
    ("5 vs ground truth x=5", "5", "x=5", 1, 1),
    ("abc = 5 (left side longer than 2)", "abc = 5", "5", 0, 1),
    ("y = 2x + 1", "y = 2x + 1", "2x+1", 1, 1),
    ("x=1, x=2 (two '=')", "x=1, x=2", "1, 2", 0, -1),
    ("\\sqrt2", r"\sqrt2", r"\sqrt{2}", 1, 1),
    ("\\sqrt 2 with a space", r"\sqrt 2", r"\sqrt{2}", 0, 1),
    ("2\\sqrt3", r"2\sqrt3", r"2\sqrt{3}", 1, 1),
    ("\\frac{\\sqrt{3}}{2} vs \\frac{\\sqrt3}{2}", r"\frac{\sqrt{3}}{2}", r"\frac{\sqrt3}{2}", 1, 1),
    ("\\sqrt{3}/2 vs \\frac{\\sqrt{3}}{2}", r"\sqrt{3}/2", r"\frac{\sqrt{3}}{2}", 0, -1),
    ("\\dfrac{\\sqrt{5}}{2} vs \\frac{\\sqrt5}{2}", r"\dfrac{\sqrt{5}}{2}", r"\frac{\sqrt5}{2}", 1, -1),
    ("-\\frac{1}{3} vs -\\frac13", r"-\frac{1}{3}", r"-\frac13", 1, 1),
    ("\\frac{1}{2} vs ground truth 1/2", r"\frac{1}{2}", "1/2", 1, -1),
    ("\\frac{1}{2} vs ground truth 0.5", r"\frac{1}{2}", "0.5", 1, -1),
    ("-0.5 vs -\\frac{1}{2}", "-0.5", r"-\frac{1}{2}", 0, -1),
    ("1 / 2 with spaces", "1 / 2", r"\frac{1}{2}", 1, -1),
    ("10/4 not reduced", "10/4", r"\frac{10}{4}", 1, -1),
    ("x/2", "x/2", r"\frac{x}{2}", 0, -1),
    ("\\frac at the end (fix_fracs raises)", r"3\frac", "3", 0, -1),
    ("\\frac1 single character (fix_fracs assert)", r"\frac1", r"\frac{1}{}", 0, -1),
    ("\\sqrt at the end (fix_sqrt raises)", r"2\sqrt", r"2\sqrt{}", 0, -1),
    ("doubled backslash \\\\frac", r"\\frac{1}{2}", r"\frac{1}{2}", 1, -1),
    ("2\\pi vs 2 \\pi", r"2\pi", r"2 \pi", 1, 1),
    ("-\\infty", r"-\infty", r"-\infty", 1, 1),
    ("set \\{1,2\\} vs \\{1, 2\\}", r"\{1,2\}", r"\{1, 2\}", 1, 1),
    ("\\text{(A)}", r"\text{(A)}", r"\text{(A)}", 1, 1),
    ("A vs \\text{(A)}", "A", r"\text{(A)}", 0, -1),
    ("(A) vs \\text{(A)}", "(A)", r"\text{(A)}", 0, 1),
    ("\\text{5} vs 5", r"\text{5}", "5", 0, 1),
    ("\\textbf{5} vs 5", r"\textbf{5}", "5", 0, 1),
    ("\\mathbf{5} vs 5", r"\mathbf{5}", "5", 0, -1),
    ("\\overline{3} vs 3", r"\overline{3}", "3", 0, 1),
    ("5. trailing period", "5.", "5", 0, -1),
    ("tab before 5", "\t5", "5", 0, 1),
    ("2a + 3 vs 2a+3 ('a ' is removed)", "2a + 3", "2a+3", 1, -1),
    ("\\tan x", r"\tan x", r"\tan x", 1, 1),
    ("\\sigma^2 ('gm' is a removed unit)", r"\sigma^2", r"\sigma^2", 1, 1),
    ("1, 2, \\ldots vs 1,2 (dapo drops commas of digit-only answers: both become 12)", r"1, 2, \ldots", "1,2", 0, 1),
    ("1000000", "1000000", "1000000", 1, 1),
    ("3.14", "3.14", "3.14", 1, 1),
    ("0.25 vs \\frac{1}{4}", "0.25", r"\frac{1}{4}", 0, -1),
    ("1.2\\times 10^{3} vs 1200", r"1.2\times 10^{3}", "1200", 0, -1),
    ("pmatrix, identical", r"\begin{pmatrix} 1 \\ 2 \end{pmatrix}", r"\begin{pmatrix} 1 \\ 2 \end{pmatrix}", 1, 1),
    ("pmatrix, different spacing (dapo's r'\\ ' substitution eats a backslash)", r"\begin{pmatrix}1\\2\end{pmatrix}", r"\begin{pmatrix} 1 \\ 2 \end{pmatrix}", 1, -1),
    ("3 \\text{ and } 4 vs 3, 4", r"3 \text{ and } 4", "3, 4", 0, 1),
    ("( 3 , -4 ) spaces", "( 3 , -4 )", "(3,-4)", 1, 1),
    ("(3, -4) vs \\{3, -4\\}", "(3, -4)", r"\{3, -4\}", 0, -1),
    ("3+4i vs 3 + 4i", "3+4i", "3 + 4i", 1, 1),
    ("quoted \"5\"", '"5"', "5", 0, 1),
    ("\\displaystyle\\frac{1}{2}", r"\displaystyle\frac{1}{2}", r"\frac{1}{2}", 0, -1),
    ("12 vs ground truth ' 12 '", "12", " 12 ", 1, 1),
    ("12 vs ground truth $12$", "12", "$12$", 0, 1),
    ("\\left[ 0, 1 \\right]", r"\left[ 0, 1 \right]", "[0,1]", 1, -1),
    ("8 ways", "8 ways", "8", 0, 1),
    ("5 m (metres, bare)", "5 m", "5", 0, -1),
    ("5\\text{m}", r"5\text{m}", "5", 0, 1),
    ("5 \\text{meters}", r"5 \text{meters}", "5", 0, 1),
    ("45 minutes", "45 minutes", "45", 0, 1),
    ("10 \\; \\text{units}", r"10 \; \text{units}", "10", 0, 1),
    ("non-BMP math italic x", "2" + MATH_EMOJI, "2" + MATH_EMOJI, 1, 1),
]


def math_reward_cases():
    cases = []

    def case(note, response, gt, want=None):
        cases.append({"note": note, "response": response, "ground_truth": gt, "want": want})

    for note, pred, gt, want_mr, _ in FORMS:
        case("form: " + note, MATH_COT + "The final answer is $\\boxed{" + pred + "}$.", gt, want_mr)

    B = r"\boxed"
    case("boxed answer at the end", MATH_COT + r"So the answer is \boxed{5}.", "5", 1)
    case("no boxed answer", MATH_COT + "So the answer is 5.", "5", 0)
    case("empty response", "", "5", 0)
    case("nested braces \\boxed{\\frac{1}{\\sqrt{2}}}", r"\boxed{\frac{1}{\sqrt{2}}}", r"\frac{1}{\sqrt{2}}", 1)
    case("nested braces, different form", r"\boxed{\frac{1}{\sqrt{2}}}", r"\frac{\sqrt{2}}{2}", 0)
    case("several boxed, the last is right", r"First \boxed{4}, then corrected: \boxed{5}", "5", 1)
    case("several boxed, the first is right", r"First \boxed{5}, then corrected: \boxed{4}", "5", 0)
    case("boxed early then 2000 chars of text (no clip in math_reward)", r"\boxed{5}" + "\n" + filler(2000), "5", 1)
    case("unclosed \\boxed{5", MATH_COT + r"\boxed{5", "5", 0)
    case("closed then unclosed: the last (unclosed) is taken", r"\boxed{5} and then \boxed{6", "5", 0)
    case("unclosed then closed", r"\boxed{6 hmm, no: \boxed{5}", "5", 1)
    case("'\\boxed 5' with a space, at the end", MATH_COT + r"The answer is \boxed 5", "5", 1)
    case("'$\\boxed 5$.'", MATH_COT + r"The answer is $\boxed 5$.", "5", 1)
    case("'\\boxed 5.' period, no dollar", MATH_COT + r"The answer is \boxed 5.", "5", 0)
    case("'\\boxed 5 and ...' text after the space form", r"\boxed 5 and that is the answer", "5", 0)
    case("space form before a later braced box: the space form wins", r"We get $\boxed 5$ then later \boxed{6}", "5", 1)
    case("space form before a later braced box, ground truth the later one", r"We get $\boxed 5$ then later \boxed{6}", "6", 0)
    case("'\\boxed {6}' space before the brace", r"\boxed{5} and \boxed {6}", "6", 0)
    case("only '\\boxed {5}'", r"The answer is \boxed {5}", "5", 0)
    case("\\fbox{5} only (remove_boxed asserts)", MATH_COT + r"\fbox{5}", "5", 0)
    case("\\boxed{5} earlier plus \\fbox{6} later: \\boxed wins", r"\boxed{5} and \fbox{6}", "5", 1)
    case("'\\boxed5' without braces", r"The answer is \boxed5", "5", 0)
    case("'\\boxed5' then braces later", r"The answer is \boxed5, as {x} shows", "5", 0)
    case("prose '\\boxed.' after the answer", r"The answer is \boxed{5}. I put it in \boxed.", "5", 0)
    case("\\boxed{\\boxed{5}}", r"\boxed{\boxed{5}}", "5", 1)
    case("\\boxed{{5}} double braces", r"\boxed{{5}}", "5", 0)
    case("\\boxed{} empty", r"\boxed{}", "0", 0)
    case("extra closing brace \\boxed{5}}", r"\boxed{5}}", "5", 1)
    case("\\boxed{ 5 } spaces", r"\boxed{ 5 }", "5", 1)
    case("\\[\\boxed{5}\\]", "Thus\n\\[\\boxed{5}\\]", "5", 1)
    case("\\boxed{\\text{(C)}}", r"\boxed{\text{(C)}}", r"\text{(C)}", 1)
    case("\\boxed{C} vs \\text{(C)}", r"\boxed{C}", r"\text{(C)}", 0)
    case("emoji before the box", EMOJI * 20 + r" \boxed{5}", "5", 1)
    case("boxed then 500 emoji", r"\boxed{5}" + EMOJI * 500, "5", 1)
    case("newline between \\boxed and {", "\\boxed\n{5}", "5", 0)
    case("CRLF around the box", "Step 1.\r\nSo \\boxed{5}\r\n", "5", 1)
    case("\\boxed{\\dfrac{3}{4}} vs \\frac34", r"\boxed{\dfrac{3}{4}}", r"\frac34", 1)
    case("\\boxed{1,\\!000} vs 1000", r"\boxed{1,\!000}", "1000", 0)
    case("\\boxed{1,\\!000} vs 1,000", r"\boxed{1,\!000}", "1,000", 1)
    case("boxed ground truth \\boxed{5}", r"\boxed{5}", r"\boxed{5}", 0)
    case("\\boxed{x \\in [2, 5]} vs [2,5]", r"\boxed{x \in [2, 5]}", "[2,5]", 0)
    case("\\boxed{x = 2}", r"\boxed{x = 2}", "2", 1)
    case("two space forms, the last wins", r"$\boxed 4$ no wait $\boxed 5$", "5", 1)
    case("space form with nothing after it", r"The answer is \boxed ", "5", 0)
    case("braced box then a bare '\\boxed ' (space form wins, empty)", r"\boxed{5} \boxed ", "5", 0)
    case("unclosed nested \\boxed{\\frac{1}{2}", r"\boxed{\frac{1}{2}", r"\frac{1}{2}", 0)
    case("\\boxed{a}{b}", r"\boxed{3}{4}", "3", 1)
    case("\\boxed{\\{1,2\\}}", r"\boxed{\{1,2\}}", r"\{1,2\}", 1)
    case("\\boxed{\\left\\{1,2\\right\\}}", r"\boxed{\left\{1,2\right\}}", r"\{1,2\}", 1)
    case("long response, box in the middle and a final box", filler(3000) + r"\boxed{4}" + filler(3000) + r"\boxed{5}", "5", 1)
    case("\\boxed{\\$10} vs \\$10", r"\boxed{\$10}", r"\$10", 1)
    case("\\boxed{5} vs 5.0", r"\boxed{5}", "5.0", 0)
    case("\\boxed{5} vs 05", r"\boxed{5}", "05", 0)
    case("\\boxed{\\frac{-1}{2}} vs -\\frac{1}{2}", r"\boxed{\frac{-1}{2}}", r"-\frac{1}{2}", 0)
    case("\\boxed{2^{10}} vs 1024", r"\boxed{2^{10}}", "1024", 0)
    case("\\boxed{\\text{5 cm}}", r"\boxed{\text{5 cm}}", "5", 0)
    case("\\boxed{(1,2)} vs (1, 2)", r"\boxed{(1,2)}", "(1, 2)", 1)
    case("\\boxed{5} vs 5\\%", r"\boxed{5}", r"5\%", 1)
    case("$$ display with box", "$$\\boxed{12}$$", "12", 1)
    case("\\boxed{0.5} vs \\frac12", r"\boxed{0.5}", r"\frac12", 1)
    case("\\boxed{\\frac12} vs .5", r"\boxed{\frac12}", ".5", 1)
    case("\\boxed{\\text{ cm}}", r"\boxed{\text{ cm}}", "", 1)
    case("\\boxed{} vs empty ground truth", r"\boxed{}", "", 1)
    case("boxed answer in markdown bold", r"**Final answer:** $\boxed{42}$", "42", 1)
    case("\\boxed{42} with \\fbox mentioned earlier", r"(not \fbox{41}) \boxed{42}", "42", 1)
    case("\\fbox{42} with a later unclosed {", r"\fbox{42} {", "42", 0)
    case("\\boxed{\\sqrt{2}} vs \\sqrt2", r"\boxed{\sqrt{2}}", r"\sqrt2", 1)
    case("\\boxed{\\sqrt 2} vs \\sqrt2", r"\boxed{\sqrt 2}", r"\sqrt2", 0)
    case("\\boxed{k = 3} vs 3", r"\boxed{k = 3}", "3", 1)
    case("\\boxed{\\infty}", r"\boxed{\infty}", r"\infty", 1)
    case("\\boxed{\\pi} vs pi", r"\boxed{\pi}", "pi", 0)
    case("\\boxed{\\frac{\\pi}{4}} vs \\frac\\pi4", r"\boxed{\frac{\pi}{4}}", r"\frac\pi4", 0)
    case("boxed with newline inside", "\\boxed{\\frac{1}\n{2}}", r"\frac{1}{2}", 1)
    case("boxed 30^\\circ vs 30^{\\circ}", r"\boxed{30^\circ}", r"30^{\circ}", 1)
    case("four boxes, the third right", r"\boxed{1} \boxed{2} \boxed{5} \boxed{3}", "5", 0)
    case("box inside a sentence with a dollar after", r"so $x=\boxed{7}$, done", "7", 1)
    case("box content with escaped braces only", r"\boxed{\{\}}", r"\{\}", 1)
    case("box with a closing brace first", r"\boxed}{5}", "5", 0)
    case("\\boxed{-3/4} vs ground truth -3/4", r"\boxed{-3/4}", "-3/4", 1)
    case("\\boxed{1/2/3}", r"\boxed{1/2/3}", "1/2/3", 1)
    case("\\boxed{+1/2} vs \\frac12", r"\boxed{+1/2}", r"\frac12", 0)
    case("\\boxed{2} then the space form in a later sentence", r"\boxed{2}. Also note \boxed 3 is wrong.", "2", 0)
    case("right answer, ground truth with \\n", r"\boxed{12}", "1\n2", 1)
    case("\\boxed{5\\text{ cm}^2} vs 5", r"\boxed{5\text{ cm}^2}", "5", 1)
    case("\\boxed{\\frac{1}{2}\\frac3}", r"\boxed{\frac{1}{2}\frac3}", r"\frac{1}{2}\frac3", 1)
    case("\\boxed{.5} vs 0.5", r"\boxed{.5}", "0.5", 1)
    case("\\boxed{ .5} vs 1/2", r"\boxed{ .5}", "1/2", 1)
    case("\\boxed{\\frac{1}{2}} vs \\frac{2}{4}", r"\boxed{\frac{1}{2}}", r"\frac{2}{4}", 0)
    case("\\boxed{10^\\circ\\text{ C}}", r"\boxed{10^\circ\text{ C}}", "10", 1)
    case("\\boxed{\\$ 5.00} vs 5", r"\boxed{\$ 5.00}", "5", 0)
    case("\\boxed{\\! 5}", r"\boxed{\! 5}", "5", 1)
    return cases


def math_dapo_cases():
    cases = []

    def case(note, response, gt, want=None, **options):
        cases.append({"note": note, "response": response, "ground_truth": gt, "options": options, "want": want})

    for note, pred, gt, _, want_d in FORMS:
        case("form: " + note, MATH_COT + "Answer: " + pred, gt, want_d)

    case("'Answer: 5' at the end", MATH_COT + "Answer: 5", "5", 1)
    case("lowercase 'answer: 5'", MATH_COT + "answer: 5", "5", 1)
    case("'ANSWER : 5' with a space before the colon", MATH_COT + "ANSWER : 5", "5", 1)
    case("'Final Answer: 5'", MATH_COT + "Final Answer: 5", "5", 1)
    case("Minerva sentence '...is $5$. I hope it is correct.'", MATH_COT + "Final Answer: The final answer is $5$. I hope it is correct.", "5", 1)
    case("'Answer:' then the value on the next line", MATH_COT + "Answer:\n5", "5", 1)
    case("'Answer:5' no space", MATH_COT + "Answer:5", "5", 1)
    case("'The answer is 5' (no colon)", MATH_COT + "The answer is 5", "5", -1)
    case("'Answer: 5.' trailing period", MATH_COT + "Answer: 5.", "5", -1)
    case("two Answer lines, the last is right", "Answer: 4\nWait, that is wrong.\nAnswer: 5", "5", 1)
    case("two Answer lines, the first is right", "Answer: 5\nWait, that is wrong.\nAnswer: 4", "5", -1)
    case("two 'Answer:' on one line", "Answer: 4, no, Answer: 5", "5", -1)
    case("'Answer: 5' then 300+ chars (clipped away)", "Answer: 5\n" + filler(310), "5", -1)
    s300 = "Answer: 5\n" + filler(290)
    case("exactly 300 chars, 'Answer: 5' at index 0", s300, "5", 1)
    case("301 chars, the 'A' is clipped ('nswer: 5')", "Answer: 5\n" + filler(291), "5", -1)
    case("50 emoji after the answer: inside 300 code points, not 300 UTF-16 units", filler(200) + "Answer: 5\n" + EMOJI * 50 + filler(220), "5", 1)
    case("'Answer: 5' then 290 emoji (exactly 300 code points from 'A')", filler(50) + "Answer: 5\n" + EMOJI * 290, "5", 1)
    case("'Answer: 5' then 291 emoji (the 'A' is clipped)", filler(50) + "Answer: 5\n" + EMOJI * 291, "5", -1)
    case("emoji before 'Answer:'", EMOJI * 100 + "\nAnswer: 5", "5", 1)
    case("'Answer: $\\boxed{5}$'", MATH_COT + r"Answer: $\boxed{5}$", "5", 1)
    case("'Answer: \\boxed{5}.' period after the box", MATH_COT + r"Answer: \boxed{5}.", "5", -1)
    case("'Answer: \\boxed{5}'", MATH_COT + r"Answer: \boxed{5}", "5", 1)
    case("'Answer: $5$.'", MATH_COT + "Answer: $5$.", "5", 1)
    case("'Answer: 5 apples'", MATH_COT + "Answer: 5 apples", "5", -1)
    case("'Answer: 5 dollars'", MATH_COT + "Answer: 5 dollars", "5", 1)
    case("'Answer: a = 5'", MATH_COT + "Answer: a = 5", "5", 1)
    case("'Answer: \\(5\\)' inline math parens", MATH_COT + r"Answer: \(5\)", "5", -1)
    case("'**Answer:** 5' markdown bold", MATH_COT + "**Answer:** 5", "5", -1)
    case("'**Answer: 5**' markdown bold", MATH_COT + "**Answer: 5**", "5", -1)
    case("'Answer: \\[5\\]'", MATH_COT + r"Answer: \[5\]", "5", -1)
    case("'Answer: 5' with CRLF", MATH_COT.replace("\n", "\r\n") + "Answer: 5\r\n", "5", 1)
    case("'Answer:' then blank lines then 5", MATH_COT + "Answer:   \n\n  5", "5", 1)
    case("'Answer:' at the very end", MATH_COT + "5\nAnswer:", "5", -1)
    case("'The Answer is: 5'", MATH_COT + "The Answer is: 5", "5", -1)
    case("fullwidth colon 'Answer\uff1a5'", MATH_COT + "Answer\uff1a5", "5", -1)
    case("'Answer - 5'", MATH_COT + "Answer - 5", "5", -1)
    case("'Answer: x = 1 or x = 2' (split on '=')", MATH_COT + "Answer: x = 1 or x = 2", "1, 2", -1)
    case("ground truth \\boxed{5}", MATH_COT + "Answer: 5", r"\boxed{5}", 1)
    case("ground truth $5$", MATH_COT + "Answer: 5", "$5$", 1)
    case("ground truth ' 5 '", MATH_COT + "Answer: 5", " 5 ", 1)
    case("ground truth \\text{(B)}, answer (B)", MATH_COT + "Answer: (B)", r"\text{(B)}", 1)
    case("ground truth \\text{(B)}, answer B", MATH_COT + "Answer: B", r"\text{(B)}", -1)
    case("ground truth 1,000, answer 1000", MATH_COT + "Answer: 1000", "1,000", 1)
    case("'Answer: $1,000$'", MATH_COT + "Answer: $1,000$", "1000", 1)
    case("empty response", "", "5", -1)
    case("'Answer: is 5'", MATH_COT + "I think the Answer: is 5", "5", -1)
    case("'Answer:' in a restated question, boxed final", "Question: ... Answer: (to be found)\n" + MATH_COT + r"\boxed{5}", "5", -1)
    case("tab after the colon", MATH_COT + "Answer:\t5", "5", 1)
    case("emoji after the answer value", MATH_COT + "Answer: 5 " + EMOJI, "5", -1)
    case("'Answer: 5 $' lone dollar", MATH_COT + "Answer: 5 $", "5", 1)
    case("'Answer: $\\frac{1}{2}$' vs \\frac12", MATH_COT + r"Answer: $\frac{1}{2}$", r"\frac12", 1)
    case("'Answer: \\frac{1}{2}' vs ground truth $\\frac{1}{2}$", MATH_COT + r"Answer: \frac{1}{2}", r"$\frac{1}{2}$", 1)
    case("'Answer: $5$ and $6$' keeps the first $...$", MATH_COT + "Answer: $5$ and $6$", "5", 1)
    case("'Answer: 1 + 1 = 2' keeps the part after the last '='", MATH_COT + "Answer: 1 + 1 = 2", "2", 1)
    case("'Answer: \\text{Monday}'", MATH_COT + r"Answer: \text{Monday}", "Monday", 1)
    case("'Answer: Monday' vs \\text{Monday}", MATH_COT + "Answer: Monday", r"\text{Monday}", 1)
    case("'Answer: an apple' ('an ' removed)", MATH_COT + "Answer: an apple", "apple", 1)
    case("'Answer: banana split' ('an' inside words)", MATH_COT + "Answer: banana split", "banana split", 1)
    case("'Answer: 10 \\text{students}'", MATH_COT + r"Answer: 10 \text{students}", "10", 1)
    case("'Answer: 7 edges'", MATH_COT + "Answer: 7 edges", "7", 1)
    case("'Answer: 5\\text{s}' (\\text{s} removed)", MATH_COT + r"Answer: 5\text{s}", "5", 1)
    case("'Answer: 4\\text{.}'", MATH_COT + r"Answer: 4\text{.}", "4", 1)
    case("'Answer: 3\\mathrm{th}'", MATH_COT + r"Answer: 3\mathrm{th}", "3", 1)
    case("'Answer: 1\\;000'", MATH_COT + r"Answer: 1\;000", "1000", 1)
    case("'Answer: 1,\\!000'", MATH_COT + r"Answer: 1,\!000", "1000", 1)
    case("'Answer: 1, 2, \\dots'", MATH_COT + r"Answer: 1, 2, \dots", "1,2,", 1)
    case("\\sqrt[3]{2} both sides", MATH_COT + r"Answer: \sqrt[3]{2}", r"\sqrt[3]{2}", 1)
    case("\\sqrt[3]{2} vs 2^{1/3}", MATH_COT + r"Answer: \sqrt[3]{2}", "2^{1/3}", -1)
    case("'Answer: \\boxed{\\frac{1}{2}}' vs \\frac{1}{2}", MATH_COT + r"Answer: \boxed{\frac{1}{2}}", r"\frac{1}{2}", 1)
    case("'Answer: 1, 2' vs ground truth 12 (digit-only answers lose their commas)", MATH_COT + "Answer: 1, 2", "12", 1)
    case("'Answer: 1, 2' vs ground truth 1,2", MATH_COT + "Answer: 1, 2", "1,2", 1)
    case("'Answer: 3, 4' vs ground truth 4, 3", MATH_COT + "Answer: 3, 4", "4, 3", -1)
    case("'Answer: \\boxed{5} or \\boxed{6}' greedy \\boxed regex", MATH_COT + r"Answer: \boxed{5} or \boxed{6}", "5} or \\boxed{6", 1)

    S = {"strict_box_verify": True}
    case("strict: \\boxed{5} at the end", MATH_COT + r"\boxed{5}", "5", 1, **S)
    case("strict: \\boxed{ 5} (no normalization)", MATH_COT + r"\boxed{ 5}", "5", -1, **S)
    case("strict: \\boxed{\\frac{1}{2}}", MATH_COT + r"So $\boxed{\frac{1}{2}}$.", r"\frac{1}{2}", 1, **S)
    case("strict: \\boxed{\\frac{1}{2}} vs \\frac12", MATH_COT + r"\boxed{\frac{1}{2}}", r"\frac12", -1, **S)
    case("strict: box more than 100 chars before the end", r"\boxed{5}" + filler(120), "5", -1, **S)
    case("strict: box starting exactly 100 chars from the end", r"\boxed{5}" + filler(91), "5", 1, **S)
    case("strict: box starting 101 chars from the end", r"\boxed{5}" + filler(92), "5", -1, **S)
    case("strict: box then 40 emoji (inside 100 code points, not 100 UTF-16 units)", filler(50) + r"\boxed{5}" + EMOJI * 40 + filler(40), "5", 1, **S)
    case("strict: '\\boxed 5' space form", MATH_COT + r"\boxed 5", "5", -1, **S)
    case("strict: \\fbox{5}", MATH_COT + r"\fbox{5}", "5", -1, **S)
    case("strict: several boxes, the last", r"\boxed{4} \boxed{5}", "5", 1, **S)
    case("strict: closed then unclosed", r"\boxed{5} \boxed{6", "5", -1, **S)
    case("strict: 'Answer: 5' without a box", MATH_COT + "Answer: 5", "5", -1, **S)
    case("strict: ground truth \\boxed{5}", MATH_COT + r"\boxed{5}", r"\boxed{5}", -1, **S)
    case("strict: ground truth $5$", MATH_COT + r"\boxed{5}", "$5$", -1, **S)
    case("strict: '\\boxed{5}.'", MATH_COT + r"\boxed{5}.", "5", 1, **S)
    case("strict: \\boxed{\\boxed{5}}", r"\boxed{\boxed{5}}", "5", 1, **S)
    case("strict: box plus 'Answer: 6'", r"\boxed{5} Answer: 6", "5", 1, **S)
    case("strict: empty response", "", "5", -1, **S)
    case("strict: \\boxed{} vs 0", r"\boxed{}", "0", -1, **S)
    case("strict: \\boxed{1,000} vs 1000", r"\boxed{1,000}", "1000", -1, **S)
    case("strict: \\boxed{\\dfrac{1}{2}} vs \\dfrac{1}{2}", r"\boxed{\dfrac{1}{2}}", r"\dfrac{1}{2}", 1, **S)
    case("strict: window starts inside '\\boxed{' ", r"\boxed{5}" + filler(93), "5", -1, **S)
    case("strict: nested braces \\boxed{\\{1,2\\}}", r"The set is \boxed{\{1,2\}}", r"\{1,2\}", 1, **S)
    case("strict: the box in the last 100 of a 1000-char response", filler(1000) + r"\boxed{42}", "42", 1, **S)
    case("strict: 300-clip then 100-clip with emoji", EMOJI * 250 + r"\boxed{7}" + EMOJI * 20, "7", 1, **S)
    case("strict: \\boxed{7} then 91 emoji (exactly 100 code points from the backslash)", r"\boxed{7}" + EMOJI * 91, "7", 1, **S)
    case("strict: \\boxed{7} then 92 emoji (the backslash is clipped)", r"\boxed{7}" + EMOJI * 92, "7", -1, **S)
    case("strict_box_verify=False given explicitly", MATH_COT + "Answer: 5", "5", 1, strict_box_verify=False)
    case("strict: \\boxed{-7}", r"so \boxed{-7}", "-7", 1, **S)
    case("strict: \\boxed{x = 5} vs 5", r"\boxed{x = 5}", "5", -1, **S)
    return cases


# ---------------------------------------------------------------------------------------------
# prime_code
# ---------------------------------------------------------------------------------------------


def stdio(*pairs):
    """Standard-input test cases as verl rows store them."""
    return {"inputs": [p[0] for p in pairs], "outputs": [p[1] for p in pairs]}


def call(fn, *pairs):
    """Call-based test cases: each input is one JSON argument per line, each output one JSON value."""
    return {
        "fn_name": fn,
        "inputs": ["\n".join(json.dumps(a) for a in args) for args, _ in pairs],
        "outputs": [json.dumps(out) for _, out in pairs],
    }


SUM_T = stdio(("3\n1 2 3\n", "6\n"), ("5\n10 20 30 40 50\n", "150\n"), ("1\n-7\n", "-7\n"))
SUM_PROG = "n = int(input())\na = list(map(int, input().split()))\nprint(sum(a))\n"
AB_T = stdio(("2 3\n", "5\n"), ("10 -4\n", "6\n"), ("0 0\n", "0\n"), ("1000000 2000000\n", "3000000\n"))
AB_PROG = "a, b = map(int, input().split())\nprint(a + b)\n"
LINES_T = stdio(("3\n", "1\n2\n3\n"), ("1\n", "1\n"), ("5\n", "1\n2\n3\n4\n5\n"))
LINES_PROG = "n = int(input())\nfor i in range(1, n + 1):\n    print(i)\n"


def fence(code, before="Here is my solution:\n\n", after="\n\nThis runs in O(n) time."):
    return before + "```python\n" + code + "```" + after


def prime_code_cases():
    cases = []

    def case(note, response, tests, want=None):
        gt = tests if isinstance(tests, str) else json.dumps(tests)
        cases.append({"note": note, "response": response, "ground_truth": gt, "want": want})

    def lit(note, text, expected, want):
        """A program whose output is exactly `text` (written with sys.stdout.write) against `expected`."""
        prog = "import sys\nn = int(input())\nsys.stdout.write(" + repr(text) + ")\n"
        case("output format: " + note, prog, stdio(("1\n", expected)), want)

    # --- extraction of the program from the completion ---
    case("bare program, correct", SUM_PROG, SUM_T, 1)
    case("program in a ```python fence with prose around", fence(SUM_PROG), SUM_T, 1)
    case("bare program, wrong (prints the max)", SUM_PROG.replace("sum(a)", "max(a)"), SUM_T, 1 / 3)
    case("fenced program, wrong on every test", fence(SUM_PROG.replace("sum(a)", "sum(a) + 1")), SUM_T, 0)
    case("two ```python fences, the last correct", fence("print(0)\n") + "\nActually, fixed:\n" + fence(SUM_PROG), SUM_T, 1)
    case("two ```python fences, the first correct", fence(SUM_PROG) + "\nOr shorter:\n" + fence("print(0)\n"), SUM_T, 0)
    case("```py fence (not ```python): the prose is run", "Solution:\n```py\n" + SUM_PROG + "```\n", SUM_T, 0)
    case("```Python fence (capital P)", "Solution:\n```Python\n" + SUM_PROG + "```\n", SUM_T, 0)
    case("```python fence never closed", "Solution:\n```python\n" + SUM_PROG, SUM_T, 1)
    case("bare fence ``` after code that starts the response", SUM_PROG + "```\nThe code above reads n and the list.", SUM_T, 1)
    case("```python3 fence: the stray '3' line is an expression statement", "```python3\n" + SUM_PROG + "```", SUM_T, 1)
    case("CRLF line endings in the program", fence(SUM_PROG.replace("\n", "\r\n")), SUM_T, 1)
    case("fence with text on the fence line after ```python", "```python # solution\n" + SUM_PROG + "```", SUM_T, 1)
    case("a second, empty ```python fence", fence(SUM_PROG) + fence("") + "", SUM_T, 0)
    case("inline ``` in prose after a correct fence", fence(SUM_PROG, after="\nUse ```input()``` to read."), SUM_T, 1)

    # --- output comparison ladder ---
    lit("exact", "6\n", "6\n", 1)
    lit("missing final newline", "6", "6\n", 1)
    lit("expected has no final newline", "6\n", "6", 1)
    lit("trailing spaces on each line", "1 2 \n3 4 \n", "1 2\n3 4\n", 1)
    lit("leading spaces", "  6\n", "6\n", 1)
    lit("trailing blank lines", "6\n\n\n", "6\n", 1)
    lit("blank line between output lines", "1\n\n2\n", "1\n2\n", 1)
    lit("double space between tokens", "1  2\n", "1 2\n", 0)
    lit("tokens on one line vs one per line", "1 2 3\n", "1\n2\n3\n", 0)
    lit("one per line vs tokens on one line", "1\n2\n3\n", "1 2 3\n", 0)
    lit("expected output with CRLF", "1\n2\n", "1\r\n2\r\n", 1)
    lit("program prints CRLF", "1\r\n2\r\n", "1\n2\n", 1)
    lit("program prints a lone CR between lines", "1\r2\n", "1\n2\n", 1)
    lit("form feed between values (str.splitlines splits on it)", "1\x0c2\n", "1\n2\n", 1)
    lit("U+2028 line separator between values", "1\u20282\n", "1\n2\n", 1)
    lit("U+0085 next line after the value", "6\x85", "6\n", 1)
    lit("trailing U+FEFF (not whitespace to Python)", "6\ufeff\n", "6\n", 0)
    lit("trailing U+001F (whitespace to Python's strip)", "6\x1f\n", "6\n", 1)
    lit("trailing no-break space", "6\u00a0\n", "6\n", 1)
    lit("trailing tab", "6\t\n", "6\n", 1)
    lit("whitespace-only line in the expected output, program prints no blank", "1\n2\n", "1\n \n2\n", 0)
    lit("whitespace-only line in the expected output, program prints a blank line", "1\n\n2\n", "1\n \n2\n", 1)
    lit("blank line inside the expected output", "1\n2\n", "1\n\n2\n", 1)
    lit("list repr vs space-separated", "[1, 2, 3]\n", "1 2 3\n", 0)
    lit("case differs (YES vs Yes)", "YES\n", "Yes\n", 0)
    lit("True vs true", "True\n", "true\n", 0)
    lit("empty output, empty expected", "", "", 1)
    lit("empty output, expected 0", "", "0\n", 0)
    lit("output has an extra line", "6\n7\n", "6\n", 0)
    lit("output misses a line", "1\n2\n", "1\n2\n3\n", 0)
    # floats and the per-line np.allclose rung
    lit("float within 1e-5 relative", "0.3333333\n", "0.33333333\n", 1)
    lit("float outside 1e-5 relative", "1.0001\n", "1.0\n", 0)
    lit("float 1e-6 off", "1.000001\n", "1.0\n", 1)
    lit("two floats on one line, within tolerance", "0.3333333 0.5\n", "0.33333333 0.5\n", 0)
    lit("floats on separate lines, within tolerance", "0.3333333\n0.6666667\n", "0.33333333\n0.66666667\n", 1)
    lit("'025' vs '25' (all-digit lines skip the float rung)", "025\n", "25\n", 0)
    lit("'025' vs '25' next to a float line (float rung runs)", "025\n1.5\n", "25\n1.5\n", 1)
    lit("'1e3' vs '1000'", "1e3\n", "1000\n", 1)
    lit("'1_000' vs '1000' (float() accepts underscores)", "1_000\n", "1000\n", 1)
    lit("'0x10' vs '16'", "0x10\n", "16\n", 0)
    lit("'0b10000' vs '16'", "0b10000\n", "16\n", 0)
    lit("'inf' vs 'Infinity'", "inf\n", "Infinity\n", 1)
    lit("'inf' vs 'inf'", "inf\n", "inf\n", 1)
    lit("'-inf' vs 'inf'", "-inf\n", "inf\n", 0)
    lit("'nan' vs 'nan' (equal strings)", "nan\n", "nan\n", 1)
    lit("'nan' vs 'NaN' (allclose says nan != nan)", "nan\n", "NaN\n", 0)
    lit("'1e-9' vs '0' (absolute tolerance 1e-8)", "1e-9\n", "0\n", 1)
    lit("'2e-8' vs '0'", "2e-8\n", "0\n", 0)
    lit("10**20+1 vs 10**20 (all digits: exact)", "100000000000000000001\n", "100000000000000000000\n", 0)
    lit("-(10**20+1) vs -(10**20) (float rung: equal doubles)", "-100000000000000000001\n", "-100000000000000000000\n", 1)
    lit("1000000000 vs 1000000007", "1000000000\n", "1000000007\n", 0)
    lit("-1000000000 vs -1000000007 (within 1e-5 relative)", "-1000000000\n", "-1000000007\n", 1)
    lit("near miss next to a negative line turns tolerance on", "1000000000\n-2\n", "1000000007\n-2\n", 1)
    lit("near miss next to a positive line stays exact", "1000000000\n2\n", "1000000007\n2\n", 0)
    lit("'+5' vs '5'", "+5\n", "5\n", 1)
    lit("'5.0' vs '5'", "5.0\n", "5\n", 1)
    lit("'5' vs '5.000'", "5\n", "5.000\n", 1)
    lit("'99999.0' vs '100000' (allclose is relative to the expected)", "99999.0\n", "100000\n", 1)
    lit("'100000.0' vs '99999' (the other way round)", "100000.0\n", "99999\n", 0)
    lit("Arabic-Indic digits vs ASCII (isdigit, no float rung)", "\u0662\u0665\n", "25\n", 0)
    lit("Arabic-Indic digits next to a negative line (float() reads them)", "\u0662\u0665\n-1\n", "25\n-1\n", 1)
    lit("float with a thousands comma", "1,000.5\n", "1000.5\n", 0)
    lit("fixed vs scientific", "0.000012\n", "1.2e-05\n", 1)
    lit("many float lines, one outside tolerance", "1.0\n2.0\n3.1\n", "1.0\n2.0\n3.0\n", 0)
    lit("'-0' vs '0'", "-0\n", "0\n", 1)
    lit("'.5' vs '0.5'", ".5\n", "0.5\n", 1)
    lit("'5.' vs '5'", "5.\n", "5\n", 1)
    lit("float output, integer expected, extra line count", "1.0\n2.0\n", "1\n", 0)
    case("outputs stored as a list of lines (truncatefn asserts str: the run crashes)", "print(1)\nprint(2)\n", {"inputs": ["\n"], "outputs": [["1", "2"]]}, 0)
    case("inputs stored as a list of lines (truncatefn asserts str: the run crashes)", SUM_PROG, {"inputs": [["3", "1 2 3"]], "outputs": ["6"]}, 0)

    # --- reading standard input ---
    case("input()", SUM_PROG, SUM_T, 1)
    case("sys.stdin.readline() with int()/split()", "import sys\nn = int(sys.stdin.readline())\nprint(sum(map(int, sys.stdin.readline().split())))\n", SUM_T, 1)
    rl_chop = "import sys\nn = int(sys.stdin.readline()[:-1])\nprint(sum(map(int, sys.stdin.readline()[:-1].split())))\n"
    case("sys.stdin.readline()[:-1], input ends with a newline", rl_chop, SUM_T, 1)
    case("sys.stdin.readline()[:-1], last line without a newline", rl_chop, stdio(("3\n1 2 3", "6\n"), ("2\n10 20", "30\n")), 0)
    fs_chop = "from sys import stdin\nn = int(stdin.readline()[:-1])\nprint(sum(map(int, stdin.readline()[:-1].split())))\n"
    case("module-level 'from sys import stdin' + readline()[:-1] (patched readline drops the newline)", fs_chop, stdio(("3\n1 2 3\n", "6\n"), ("2\n10 20\n", "30\n")), 0)
    case("same, preceded by a comment line (the import moves inside code())", "# read input\n" + fs_chop, stdio(("3\n1 2 3\n", "6\n"), ("2\n10 20\n", "30\n")), 1)
    case("same, inside a ```python fence (leading blank line)", fence(fs_chop), stdio(("3\n1 2 3\n", "6\n"), ("2\n10 20\n", "30\n")), 1)
    case("module-level stdin.readline().split()", "from sys import stdin\nn = int(stdin.readline())\nprint(sum(map(int, stdin.readline().split())))\n", SUM_T, 1)
    loop_until_empty = (
        "from sys import stdin\ninput = stdin.readline\ntotal = 0\nwhile True:\n    s = input()\n    if not s:\n        break\n"
        "    total += int(s)\nprint(total)\n"
    )
    case("patched readline loop until '' (input ends with a newline)", loop_until_empty, stdio(("1\n2\n3\n", "6\n")), 1)
    case("patched readline loop until '' (no final newline: StopIteration)", loop_until_empty, stdio(("1\n2\n3", "6\n")), 0)
    case("same loop with sys.stdin.readline (a real StringIO)", loop_until_empty.replace("from sys import stdin\ninput = stdin.readline", "import sys\ninput = sys.stdin.readline"), stdio(("1\n2\n3", "6\n")), 1)
    case("'import sys; input = sys.stdin.readline' idiom", "import sys\ninput = sys.stdin.readline\nn = int(input())\nprint(sum(map(int, input().split())))\n", SUM_T, 1)
    case("sys.stdin.read().split()", "import sys\ndata = sys.stdin.read().split()\nn = int(data[0])\nprint(sum(map(int, data[1:n + 1])))\n", SUM_T, 1)
    case("sys.stdin.readlines()", "import sys\nlines = sys.stdin.readlines()\nprint(sum(map(int, lines[1].split())))\n", SUM_T, 1)
    case("for line in sys.stdin", "import sys\nrows = [line for line in sys.stdin]\nprint(sum(map(int, rows[1].split())))\n", SUM_T, 1)
    case("open(0).read() (the real fd 0, not the test input)", "data = open(0).read().split()\nprint(sum(map(int, data[1:])))\n", SUM_T, 0)
    case("sys.stdin.buffer.read() (StringIO has no buffer)", "import sys\ndata = sys.stdin.buffer.read().split()\nprint(sum(map(int, data[1:])))\n", SUM_T, 0)
    case("module-level stdin.buffer.read() (reads the real stdin)", "from sys import stdin\ndata = stdin.buffer.read().split()\nprint(sum(map(int, data[1:])))\n", SUM_T, 0)
    case("module-level 'for line in stdin' (not patched)", "from sys import stdin\nrows = [line for line in stdin]\nprint(sum(map(int, rows[1].split())))\n", SUM_T, 0)
    case("module-level stdin.read() (patched)", "from sys import stdin\ndata = stdin.read().split()\nprint(sum(map(int, data[1:])))\n", SUM_T, 1)
    case("module-level stdin.readlines() (patched: split on '\\n', trailing '')", "from sys import stdin\nlines = stdin.readlines()\nprint(len(lines), sum(map(int, lines[1].split())))\n", stdio(("3\n1 2 3\n", "3 6\n")), 1)
    case("sys.stdin.readlines() keeps the newlines (real StringIO)", "import sys\nlines = sys.stdin.readlines()\nprint(len(lines), sum(map(int, lines[1].split())))\n", stdio(("3\n1 2 3\n", "2 6\n")), 1)
    case("input() past the end of the input (EOFError)", "n = int(input())\na = input()\nb = input()\nprint(n)\n", stdio(("3\n1 2 3\n", "3\n")), 0)
    case("input() over a blank line in the middle", "a = input()\nb = input()\nc = input()\nprint(a + c)\n", stdio(("x\n\ny\n", "xy\n")), 1)
    case("input() with no trailing newline on the last line", SUM_PROG, stdio(("3\n1 2 3", "6\n")), 1)
    case("sys.stdin.read() with a str.split on '\\n'", "import sys\nlines = sys.stdin.read().split('\\n')\nprint(len(lines))\n", stdio(("3\n1 2 3\n", "3\n")), 1)

    # --- exits ---
    case("exit() after printing (exit is None under verl)", "n = int(input())\nprint(n * 2)\nexit()\n", stdio(("3\n", "6\n")), 0)
    case("quit() after printing", "n = int(input())\nprint(n * 2)\nquit()\n", stdio(("3\n", "6\n")), 0)
    case("sys.exit(0) after printing", "import sys\nn = int(input())\nprint(n * 2)\nsys.exit(0)\n", stdio(("3\n", "6\n")), 1)
    case("sys.exit(1) after printing", "import sys\nn = int(input())\nprint(n * 2)\nsys.exit(1)\n", stdio(("3\n", "6\n")), 1)
    case("raise SystemExit after printing", "n = int(input())\nprint(n * 2)\nraise SystemExit\n", stdio(("3\n", "6\n")), 1)
    case("sys.exit() before printing", "import sys\nn = int(input())\nsys.exit()\nprint(n * 2)\n", stdio(("3\n", "6\n")), 0)
    case("sys.exit(main()) with main printing", "import sys\ndef main():\n    n = int(input())\n    print(n * 2)\n    return 0\nsys.exit(main())\n", stdio(("3\n", "6\n")), 1)
    case("exit(0) inside if __name__ == '__main__'", "def main():\n    print(int(input()) * 2)\nif __name__ == '__main__':\n    main()\n    exit(0)\n", stdio(("3\n", "6\n")), 0)
    case("os._exit(0) kills the harness process", "import os\nn = int(input())\nprint(n * 2)\nos._exit(0)\n", stdio(("3\n", "6\n")), 0)

    # --- the prelude of star imports ---
    case("math.sqrt without import (prelude: from math import *)", "n = int(input())\nprint(int(sqrt(n)))\n", stdio(("16\n", "4\n"), ("17\n", "4\n")), 1)
    case("Counter without import", "s = input().strip()\nc = Counter(s)\nprint(c.most_common(1)[0][1])\n", stdio(("aabbbc\n", "3\n"), ("z\n", "1\n")), 1)
    case("deque without import", "n = int(input())\nq = deque(range(n))\nq.rotate(1)\nprint(*q)\n", stdio(("4\n", "3 0 1 2\n")), 1)
    case("gcd and reduce without import", "a = list(map(int, input().split()))\nprint(reduce(gcd, a))\n", stdio(("12 18 24\n", "6\n")), 1)
    case("heappush/heappop without import", "a = list(map(int, input().split()))\nh = []\nfor x in a:\n    heappush(h, x)\nprint(heappop(h), heappop(h))\n", stdio(("5 1 4 2\n", "1 2\n")), 1)
    case("bisect_left and accumulate without import", "a = sorted(map(int, input().split()))\nprint(bisect_left(a, 4), list(accumulate(a))[-1])\n", stdio(("5 1 4 2\n", "2 12\n")), 1)
    case("pi without import", "r = int(input())\nprint(round(pi * r * r, 2))\n", stdio(("2\n", "12.57\n")), 1)
    case("ascii_lowercase without import", "k = int(input())\nprint(ascii_lowercase[:k])\n", stdio(("3\n", "abc\n")), 1)
    case("from __future__ import annotations (no longer first: SyntaxError)", "from __future__ import annotations\n" + SUM_PROG, SUM_T, 0)
    case("deep recursion without setrecursionlimit (prelude sets 6*10**5)", "def f(n):\n    return 0 if n == 0 else 1 + f(n - 1)\nprint(f(int(input())))\n", stdio(("5000\n", "5000\n")), 1)
    case("recursion depth 10**4 with sys.setrecursionlimit", "import sys\nsys.setrecursionlimit(20000)\ndef f(n):\n    return 0 if n == 0 else n + f(n - 1)\nprint(f(int(input())))\n", stdio(("10000\n", "50005000\n")), 1)
    case("numpy array sum", "import numpy as np\nn = int(input())\na = np.array(list(map(int, input().split())))\nprint(a.sum())\n", SUM_T, 1)
    case("numpy mean prints a float", "import numpy as np\nn = int(input())\na = np.array(list(map(int, input().split())))\nprint(a.mean())\n", stdio(("4\n1 2 3 4\n", "2.5\n"), ("2\n1 2\n", "1.5\n")), 1)
    case("numpy float32 rounding within tolerance", "import numpy as np\nx = np.float32(1) / np.float32(3)\nn = input()\nprint(x)\n", stdio(("1\n", "0.3333333333\n")), 1)

    # --- the def code() wrapping ---
    glob = "n = int(input())\ncnt = 0\ndef inc():\n    global cnt\n    cnt += 1\nfor _ in range(n):\n    inc()\nprint(cnt)\n"
    case("top-level global used via 'global' in a function (NameError under def code())", glob, stdio(("3\n", "3\n")), 0)
    case("closure over a list instead of 'global'", "n = int(input())\ncnt = [0]\ndef inc():\n    cnt[0] += 1\nfor _ in range(n):\n    inc()\nprint(cnt[0])\n", stdio(("3\n", "3\n")), 1)
    case("recursive helper function reading an outer variable", "n = int(input())\nmemo = {}\ndef fib(k):\n    if k < 2:\n        return k\n    if k not in memo:\n        memo[k] = fib(k - 1) + fib(k - 2)\n    return memo[k]\nprint(fib(n))\n", stdio(("10\n", "55\n"), ("30\n", "832040\n")), 1)
    main_prog = "def main():\n    n = int(input())\n    a = list(map(int, input().split()))\n    print(sum(a))\n"
    case("if __name__ == \"__main__\": main() as the last block", main_prog + "\nif __name__ == \"__main__\":\n    main()\n", SUM_T, 1)
    case("if __name__ == '__main__' not the last statement", main_prog + "\nif __name__ == '__main__':\n    main()\n\nDEBUG = False\n", SUM_T, 0)
    case("if '__main__' == __name__ (reversed, not unwrapped)", main_prog + "\nif '__main__' == __name__:\n    main()\n", SUM_T, 0)
    case("if __name__ == '__main__' and True", main_prog + "\nif __name__ == '__main__' and True:\n    main()\n", SUM_T, 0)
    case("if __name__ == '__main__': ... else: (the else is dropped)", main_prog + "\nif __name__ == '__main__':\n    main()\nelse:\n    print('imported')\n", SUM_T, 1)
    case("main() called unconditionally", main_prog + "\nmain()\n", SUM_T, 1)
    case("__main__ block followed by a trailing comment (comments are not statements)", main_prog + "\nif __name__ == '__main__':\n    main()\n# end of solution\n", SUM_T, 1)
    ml = 's = """ab\ncd"""\nn = input()\nprint(len(s))\n'
    case("multi-line string literal gains a tab under def code()", ml, stdio(("1\n", "5\n")), 0)
    case("multi-line string literal inside an unwrapped __main__ block (ast.unparse)", 'def main():\n    s = """ab\ncd"""\n    n = input()\n    print(len(s))\nif __name__ == "__main__":\n    main()\n', stdio(("1\n", "5\n")), 1)
    case("printing a multi-line string (the added tab is stripped per line)", 'n = input()\nprint("""line one\nline two""")\n', stdio(("1\n", "line one\nline two\n")), 1)
    case("only imports (no code() is defined)", "import sys\nimport math\n", SUM_T, 0)
    case("only a comment", "# TODO: solve this\n", SUM_T, 0)
    case("empty response", "", SUM_T, 0)
    case("whitespace-only response", "\n\n   \n", SUM_T, 0)
    case("program prints nothing", "n = int(input())\na = input()\n", SUM_T, 0)
    case("program prints nothing, expected empty output", "n = int(input())\n", stdio(("3\n", ""), ("4\n", "\n")), 1)
    case("syntax error", "n = int(input()\nprint(n)\n", SUM_T, 0)
    case("runtime error after printing the right answer", SUM_PROG + "x = 1 / 0\n", SUM_T, 0)
    case("ZeroDivisionError on one of three tests", "a, b = map(int, input().split())\nprint(a // b)\n", stdio(("6 3\n", "2\n"), ("5 0\n", "0\n"), ("9 3\n", "3\n")), 2 / 3)
    case("tab-indented program", "n = int(input())\nfor i in range(1, n + 1):\n\tprint(i)\n", LINES_T, 1)
    case("import inside a function", "def solve():\n    import math\n    n = int(input())\n    print(math.factorial(n))\nsolve()\n", stdio(("5\n", "120\n")), 1)
    case("import after the first statement (moved inside code())", "n = int(input())\nimport math\nprint(math.factorial(n))\n", stdio(("5\n", "120\n")), 1)
    case("class defined at top level", "class P:\n    def __init__(self, x):\n        self.x = x\nn = int(input())\nprint(P(n).x * 3)\n", stdio(("2\n", "6\n")), 1)
    case("top-level return (legal inside def code())", "n = int(input())\nif n == 0:\n    print('zero')\n    return\nprint(n)\n", stdio(("0\n", "zero\n"), ("5\n", "5\n")), 1)
    case("top-level yield makes code() a generator (nothing runs)", "n = int(input())\nprint(n)\nif False:\n    yield\n", stdio(("5\n", "5\n")), 0)
    case("print with sep and end", "n = int(input())\nprint(*range(n), sep=', ', end='!\\n')\n", stdio(("3\n", "0, 1, 2!\n")), 1)
    case("'from itertools import permutations' as the first line", "from itertools import permutations\ns = input().strip()\nfor p in sorted(set(permutations(s))):\n    print(''.join(p))\n", stdio(("aba\n", "aab\naba\nbaa\n")), 1)
    case("lines_prog correct", LINES_PROG, LINES_T, 1)
    case("lines_prog off by one", LINES_PROG.replace("n + 1", "n"), LINES_T, 0)
    case("a+b correct", AB_PROG, AB_T, 1)
    case("a+b wrong for negatives", "a, b = map(int, input().split())\nprint(abs(a) + abs(b))\n", AB_T, 0.75)
    case("a+b printed as float", "a, b = map(int, input().split())\nprint(float(a + b))\n", AB_T, 1)
    case("a+b printed with a label", "a, b = map(int, input().split())\nprint('Answer:', a + b)\n", AB_T, 0)
    case("a+b: reads with input().split() but a and b on separate lines", "a = int(input())\nb = int(input())\nprint(a + b)\n", AB_T, 0)
    case("division printed with many digits", "a, b = map(int, input().split())\nprint(a / b)\n", stdio(("1 3\n", "0.333333333\n"), ("22 7\n", "3.142857143\n"), ("2 4\n", "0.5\n")), 1)
    case("division printed with 4 decimals (outside tolerance)", "a, b = map(int, input().split())\nprint('%.4f' % (a / b))\n", stdio(("1 3\n", "0.333333333\n"), ("22 7\n", "3.142857143\n"), ("2 4\n", "0.5\n")), 1 / 3)
    case("division printed with 6 decimals (inside tolerance)", "a, b = map(int, input().split())\nprint('%.6f' % (a / b))\n", stdio(("1 3\n", "0.333333333\n"), ("22 7\n", "3.142857143\n"), ("2 4\n", "0.5\n")), 1)

    # --- more than 10 tests, continuous shares ---
    many = stdio(*[(f"{i} {i}\n", f"{2 * i}\n") for i in range(12)])
    case("12 tests, all pass", "a, b = map(int, input().split())\nprint(a + b)\n", many, 1)
    case("12 tests, only test 11 fails (continuous looks at the first 10)", "a, b = map(int, input().split())\nprint(a + b if a != 10 else 0)\n", many, 1)
    case("12 tests, test 3 fails", "a, b = map(int, input().split())\nprint(a + b if a != 2 else 0)\n", many, 0.9)
    case("12 tests, half fail", "a, b = map(int, input().split())\nprint(a + b if a % 2 == 0 else 0)\n", many, 0.5)
    case("12 tests, all fail", "a, b = map(int, input().split())\nprint(a * b + 2)\n", many, 0)
    five = stdio(*[(f"{i}\n", f"{i * i}\n") for i in range(1, 6)])
    case("5 tests, 2 fail", "n = int(input())\nprint(n * n if n < 4 else n)\n", five, 0.6)
    case("5 tests, 1 raises", "n = int(input())\nprint(n * n if n != 3 else [][1])\n", five, 0.8)
    case("5 tests, 4 fail", "n = int(input())\nprint(1)\n", five, 0.2)
    seven = stdio(*[(f"{i}\n", f"{i + 1}\n") for i in range(7)])
    case("7 tests, 1 fails", "n = int(input())\nprint(n + 1 if n != 4 else n)\n", seven, 6 / 7)
    case("7 tests, 3 raise", "n = int(input())\nprint(n + 1 if n % 2 == 0 else 1 // 0)\n", seven, 4 / 7)
    case("7 tests, output right on 5 (a trailing space is fine, an 'x' prefix is not)", "n = int(input())\nprint(str(n + 1) + ' ' if n < 5 else 'x' + str(n + 1))\n", seven, 5 / 7)
    case("sum: wrong on the single-element test", "n = int(input())\na = list(map(int, input().split()))\nprint(sum(a) if n > 1 else 0)\n", SUM_T, 2 / 3)
    case("no tests at all (all([]) is True)", SUM_PROG, {"inputs": [], "outputs": []}, 1)
    case("no tests, syntax error", "print(\n", {"inputs": [], "outputs": []}, 0)
    case("ground truth that is not JSON", SUM_PROG, '{"inputs": ["3\\n1 2 3\\n"], "outputs": ["6\\n"]', 0)
    case("fn_name null means standard input", SUM_PROG, {"fn_name": None, "inputs": SUM_T["inputs"], "outputs": SUM_T["outputs"]}, 1)
    case("infinite loop on the 2nd of 2 tests (alarm kills it)", "n = int(input())\nwhile n == 0:\n    pass\nprint(n)\n", stdio(("5\n", "5\n"), ("0\n", "0\n")), 0.5)

    # --- call-based ---
    ADD = call("add", ([1, 2], 3), ([-5, 5], 0), ([100, 23], 123))
    case("call: global function", "def add(a, b):\n    return a + b\n", ADD, 1)
    case("call: global function in a fence", fence("def add(a, b):\n    return a + b\n"), ADD, 1)
    case("call: class Solution method", "class Solution:\n    def add(self, a, b):\n        return a + b\n", ADD, 1)
    case("call: both present, Solution right and global wrong", "def add(a, b):\n    return a - b\nclass Solution:\n    def add(self, a, b):\n        return a + b\n", ADD, 1)
    case("call: both present, Solution wrong and global right", "def add(a, b):\n    return a + b\nclass Solution:\n    def add(self, a, b):\n        return a - b\n", ADD, 0)
    case("call: 'class Solution' only in a comment", "# class Solution is not needed\ndef add(a, b):\n    return a + b\n", ADD, 0)
    case("call: class SolutionHelper (substring 'class Solution')", "class SolutionHelper:\n    pass\ndef add(a, b):\n    return a + b\n", ADD, 0)
    case("call: Solution lacks the method", "class Solution:\n    def plus(self, a, b):\n        return a + b\n", ADD, 0)
    case("call: wrong function name, but fn_name 'add' is operator.add from the prelude", "def addition(a, b):\n    return a + b\n", ADD, 1)
    case("call: wrong function name (fn_name 'plus' not in the prelude)", "def addition(a, b):\n    return a + b\n", call("plus", ([1, 2], 3)), 0)
    case("call: fn_name 'max' resolves to builtins.max from the prelude", "def maximum(a):\n    return sorted(a)[0]\n", call("max", ([[1, 5, 3]], 5)), 1)
    case("call: fails one of three tests (per-test reruns lack fn_name)", "def add(a, b):\n    return a + b if a != 100 else 0\n", ADD, 0)
    case("call: raises on one test", "def add(a, b):\n    if a < 0:\n        raise ValueError\n    return a + b\n", ADD, 0)
    case("call: syntax error", "def add(a, b)\n    return a + b\n", ADD, 0)
    case("call: top-level demo print (stdout is not read)", "def add(a, b):\n    return a + b\nprint(add(2, 2))\n", ADD, 1)
    case("call: __main__ demo reading input (not run: module name is tmp_sol)", "def add(a, b):\n    return a + b\nif __name__ == '__main__':\n    a, b = map(int, input().split())\n    print(add(a, b))\n", ADD, 1)
    case("call: top-level input() at import (EOFError)", "x = input()\ndef add(a, b):\n    return a + b\n", ADD, 0)
    case("call: top-level sys.exit() at import", "import sys\ndef add(a, b):\n    return a + b\nsys.exit(0)\n", ADD, 0)
    hybrid = (
        "import json\ndef add(a, b):\n    return a + b if a != 100 else 0\n"
        "if __name__ == '__main__':\n    a = json.loads(input())\n    b = json.loads(input())\n    print(json.dumps(a + b))\n"
    )
    case("call: hybrid, wrong in call mode on one test, stdin mode right (per-test reruns read stdin)", hybrid, ADD, 1)
    hybrid2 = hybrid.replace("print(json.dumps(a + b))", "print(json.dumps(add(a, b)))")
    case("call: hybrid, the same function in both modes", hybrid2, ADD, 2 / 3)
    case("call: List[int] annotation without importing typing", "class Solution:\n    def total(self, nums: List[int]) -> int:\n        return sum(nums)\n", call("total", ([[1, 2, 3]], 6), ([[]], 0)), 1)
    case("call: returns a tuple, expected a list", "def pair(a):\n    return (a, a + 1)\n", call("pair", ([1], [1, 2]), ([5], [5, 6])), 1)
    case("call: returns a list of tuples, expected a list of lists", "def pairs(n):\n    return [(i, i * i) for i in range(n)]\n", call("pairs", ([2], [[0, 0], [1, 1]]), ([3], [[0, 0], [1, 1], [2, 4]])), 0)
    case("call: returns a list of tuples, expected wrapped once more", "def pairs(n):\n    return [(i, i * i) for i in range(n)]\n", call("pairs", ([2], [[[0, 0], [1, 1]]]), ([3], [[[0, 0], [1, 1], [2, 4]]])), 1)
    case("call: returns nested tuples", "def pairs(n):\n    return tuple((i, i * i) for i in range(n))\n", call("pairs", ([2], [[0, 0], [1, 1]])), 0)
    case("call: returns a list, expected [[...]] (first-element rule)", "def evens(n):\n    return list(range(0, n, 2))\n", call("evens", ([5], [[0, 2, 4]]), ([1], [[0]])), 1)
    case("call: zero-argument function, but the row passes one argument (null)", "def five():\n    return 5\n", call("five", ([None], [5])), 0)
    case("call: returns an int, expected [int] (first element)", "def double(x):\n    return 2 * x\n", call("double", ([2], [4]), ([7], [14])), 1)
    case("call: returns an int, expected [int, other] (first element only)", "def double(x):\n    return 2 * x\n", call("double", ([2], [4, 99])), 1)
    case("call: returns [], expected []", "def empty(n):\n    return []\n", call("empty", ([3], [])), 1)
    case("call: returns [], expected [[]]", "def empty(n):\n    return []\n", call("empty", ([3], [[]])), 1)
    case("call: returns a dict with int keys, expected JSON string keys", "def count(a):\n    d = {}\n    for x in a:\n        d[x] = d.get(x, 0) + 1\n    return d\n", call("count", ([[1, 1, 2]], {"1": 2, "2": 1})), 1)
    case("call: returns a dict with str keys '1', expected JSON '1' keys", "def count(a):\n    d = {}\n    for x in a:\n        d[str(x)] = d.get(str(x), 0) + 1\n    return d\n", call("count", ([[1, 1, 2]], {"1": 2, "2": 1})), 0)
    case("call: returns a dict with word keys", "def count(s):\n    d = {}\n    for w in s.split():\n        d[w] = d.get(w, 0) + 1\n    return d\n", call("count", (["a b a"], {"a": 2, "b": 1})), 1)
    case("call: dict argument with numeric keys is converted to int keys", "def lookup(d):\n    return d.get(1, -1)\n", call("lookup", ([{"1": 10, "2": 20}], 10)), 1)
    case("call: dict argument, function indexes with the string key", "def lookup(d):\n    return d['1']\n", call("lookup", ([{"1": 10}], 10)), 0)
    case("call: dict first argument plus a second argument (others dropped)", "def lookup(d, k):\n    return d.get(k, -1)\n", call("lookup", ([{"1": 10}, 1], 10)), 0)
    case("call: dict first argument with non-numeric keys plus a second argument", "def lookup(d, k):\n    return d.get(k, -1)\n", call("lookup", ([{"a": 10}, "a"], 10)), 1)
    case("call: list of dicts expected (only the first is kept)", "def f():\n    return [{1: 2}, {3: 4}]\n", call("f", ([None], [{"1": 2}, {"3": 4}])), 0)
    case("call: returns one dict, expected a list of dicts", "def f(x):\n    return {1: 2}\n", call("f", ([0], [{"1": 2}, {"3": 4}])), 1)
    case("call: returns True, expected 1", "def f(x):\n    return x > 0\n", call("f", ([5], 1), ([-5], 0)), 1)
    case("call: returns 1, expected true", "def f(x):\n    return 1 if x > 0 else 0\n", call("f", ([5], True), ([-5], False)), 1)
    case("call: returns 2, expected 2.0", "def f(x):\n    return x * 2\n", call("f", ([1], 2.0)), 1)
    case("call: returns 0.1+0.2, expected 0.3 (no tolerance)", "def f(a, b):\n    return a + b\n", call("f", ([0.1, 0.2], 0.3)), 0)
    case("call: returns None, expected null", "def f(x):\n    return None\n", call("f", ([1], None)), 1)
    case("call: returns None, expected 0", "def f(x):\n    x.sort()\n", call("f", ([[3, 1, 2]], [1, 2, 3])), 0)
    case("call: returns a string", "def rev(s):\n    return s[::-1]\n", call("rev", (["abc"], "cba"), (["x"], "x")), 1)
    case("call: returns a string with a trailing space", "def rev(s):\n    return s[::-1] + ' '\n", call("rev", (["abc"], "cba")), 0)
    case("call: returns numpy int64 (json.dumps fails)", "import numpy as np\ndef f(a):\n    return np.sum(np.array(a))\n", call("f", ([[1, 2, 3]], 6)), 0)
    case("call: returns numpy float64 (== gives numpy.bool_, which fails `is True`)", "import numpy as np\ndef f(a):\n    return np.mean(np.array(a, dtype=float))\n", call("f", ([[1, 2, 3]], 2.0)), 0)
    case("call: returns float(numpy float64)", "import numpy as np\ndef f(a):\n    return float(np.mean(np.array(a, dtype=float)))\n", call("f", ([[1, 2, 3]], 2.0)), 1)
    case("call: returns a set (json.dumps fails)", "def f(a):\n    return set(a)\n", call("f", ([[1, 2]], [1, 2])), 0)
    case("call: returns a generator", "def f(a):\n    return (x for x in a)\n", call("f", ([[1, 2]], [1, 2])), 0)
    case("call: returns a list of lists", "def grid(n):\n    return [[i * j for j in range(n)] for i in range(n)]\n", call("grid", ([2], [[0, 0], [0, 1]])), 1)
    case("call: returns a 1-tuple of a list", "def wrap(a):\n    return (a,)\n", call("wrap", ([[1, 2]], [[1, 2]])), 1)
    case("call: input with a trailing newline (json.loads(''))", "def add(a, b):\n    return a + b\n", {"fn_name": "add", "inputs": ["1\n2\n"], "outputs": ["3"]}, 0)
    case("call: Solution with __init__ state", "class Solution:\n    def __init__(self):\n        self.calls = 0\n    def add(self, a, b):\n        self.calls += 1\n        return a + b\n", ADD, 1)
    case("call: method uses a helper defined at module level", "def helper(x):\n    return x\nclass Solution:\n    def add(self, a, b):\n        return helper(a) + helper(b)\n", ADD, 1)
    case("call: twoSum LeetCode style", "class Solution:\n    def twoSum(self, nums: List[int], target: int) -> List[int]:\n        seen = {}\n        for i, x in enumerate(nums):\n            if target - x in seen:\n                return [seen[target - x], i]\n            seen[x] = i\n", call("twoSum", ([[2, 7, 11, 15], 9], [0, 1]), ([[3, 2, 4], 6], [1, 2]), ([[3, 3], 6], [0, 1])), 1)
    case("call: twoSum returns indices in the other order", "class Solution:\n    def twoSum(self, nums, target):\n        seen = {}\n        for i, x in enumerate(nums):\n            if target - x in seen:\n                return [i, seen[target - x]]\n            seen[x] = i\n", call("twoSum", ([[2, 7, 11, 15], 9], [0, 1]), ([[3, 2, 4], 6], [1, 2])), 0)
    case("call: string argument with newlines escaped in JSON", "def lines(s):\n    return len(s.split('\\n'))\n", call("lines", (["a\nb\nc"], 3)), 1)
    case("call: infinite loop (alarm kills the call-based run)", "def add(a, b):\n    while True:\n        pass\n", call("add", ([1, 2], 3)), 0)
    case("call: program reads stdin in a __main__ block only", "import sys\ndef add(a, b):\n    return a + b\nif __name__ == '__main__':\n    print(add(*map(int, sys.stdin.read().split())))\n", ADD, 1)
    case("call: returns a float with rounding error, expected the rounded value", "def avg(a):\n    return sum(a) / len(a)\n", call("avg", ([[0.1, 0.2, 0.3]], 0.2)), 0)
    case("call: returns an int, expected a JSON float with .0", "def half(x):\n    return x // 2\n", call("half", ([8], 4.0), ([9], 4.0)), 1)
    case("call: bool result True vs expected [true]", "def ok(x):\n    return True\n", call("ok", ([1], [True])), 1)
    case("call: one test, wrong", "def add(a, b):\n    return a * b\n", call("add", ([2, 3], 5)), 0)
    return cases


# ---------------------------------------------------------------------------------------------
# Scoring with verl
# ---------------------------------------------------------------------------------------------


def load(name, path, package_dir=None):
    if package_dir is not None:
        spec = importlib.util.spec_from_file_location(name, path, submodule_search_locations=[package_dir])
    else:
        spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


def same(a, b):
    if isinstance(a, dict) or isinstance(b, dict):
        return a == b
    return abs(float(a) - float(b)) < 1e-9


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--verl", required=True, help="path to verl v0.9.0's verl/utils/reward_score")
    ap.add_argument("--out", default=os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "test", "fixtures", "verl-rewards"))
    ap.add_argument("--only", nargs="*", help="score only these scorers (gsm8k math_reward math_dapo prime_code)")
    args = ap.parse_args()

    root = os.path.abspath(args.verl)
    gsm8k = load("verl_gsm8k", os.path.join(root, "gsm8k.py"))
    math_reward = load("verl_math_reward", os.path.join(root, "math_reward.py"))
    math_dapo = load("verl_math_dapo", os.path.join(root, "math_dapo.py"))
    pc_dir = os.path.join(root, "prime_code")
    prime_code = load("verl_prime_code", os.path.join(pc_dir, "__init__.py"), package_dir=pc_dir)

    # verl's check_correctness forks a child per run (multiprocessing's default on Linux before 3.14).
    multiprocessing.set_start_method("fork", force=True)
    # Pin fd 0: programs calling open(0) read the worker's real stdin under verl's harness.
    devnull = os.open(os.devnull, os.O_RDONLY)
    os.dup2(devnull, 0)
    os.close(devnull)

    def score_gsm8k(c):
        return float(gsm8k.compute_score(c["response"], c["ground_truth"], **c["options"]))

    def score_math_reward(c):
        return float(math_reward.compute_score(c["response"], c["ground_truth"]))

    def score_math_dapo(c):
        r = math_dapo.compute_score(c["response"], c["ground_truth"], **c["options"])
        return {"score": float(r["score"]), "acc": bool(r["acc"]), "pred": r["pred"]}

    def score_prime_code(c):
        s, _ = prime_code.compute_score(c["response"], c["ground_truth"], continuous=True)
        return float(s)

    scorers = [
        ("gsm8k", gsm8k_cases, score_gsm8k, ["response", "ground_truth", "options"]),
        ("math_reward", math_reward_cases, score_math_reward, ["response", "ground_truth"]),
        ("math_dapo", math_dapo_cases, score_math_dapo, ["response", "ground_truth", "options"]),
        ("prime_code", prime_code_cases, score_prime_code, ["response", "ground_truth"]),
    ]
    os.makedirs(args.out, exist_ok=True)
    surprises = []
    for name, make, score, fields in scorers:
        if args.only and name not in args.only:
            continue
        cases = make()
        t0 = time.time()
        rows = []
        for i, c in enumerate(cases, 1):
            cid = f"{name.replace('_', '-')}-{i:03d}"
            t1 = time.time()
            # verl prints errors and tracebacks; keep them out of this script's output
            with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):
                v = score(c)
            if time.time() - t1 > 2:
                print(f"  {cid} took {time.time() - t1:.1f} s ({c['note']})", file=sys.stderr)
            row = {"id": cid, "note": c["note"]}
            row.update({k: c[k] for k in fields})
            row["verl"] = v
            rows.append(row)
            want = c.get("want")
            got = v["score"] if isinstance(v, dict) else v
            if want is not None and not same(want, got):
                surprises.append(f"{cid} ({c['note']}): want {want}, verl {got}")
        with open(os.path.join(args.out, f"{name}.jsonl"), "w", encoding="utf-8") as f:
            for row in rows:
                f.write(json.dumps(row, ensure_ascii=False) + "\n")
        values = {}
        for row in rows:
            v = row["verl"]["score"] if isinstance(row["verl"], dict) else row["verl"]
            key = repr(round(v, 6))
            values[key] = values.get(key, 0) + 1
        print(f"{name}: {len(rows)} cases in {time.time() - t0:.1f} s; scores {dict(sorted(values.items()))}", file=sys.stderr)
    for s in surprises:
        print("differs from want: " + s, file=sys.stderr)


if __name__ == "__main__":
    main()
