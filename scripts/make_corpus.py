#!/usr/bin/env python3
"""Write examples/data/corpus.txt: short English stories composed from a small
vocabulary and grammar, for training tiny byte-level models.

The text is deterministic (its own xorshift64* generator, no `random` module),
so the same seed always gives the same bytes. Stories follow a fixed arc
(setting, a wish, a journey, a problem, help, an ending, a moral) with varied
wording, so a small model learns spelling first, then words, then the arc, and
its loss keeps falling for a while.

usage: python3 scripts/make_corpus.py [--seed N] [--bytes N] [OUTPUT]
"""
import argparse
import sys


class Rng:
    """xorshift64*: tiny, fast enough, and stable across Python versions."""

    def __init__(self, seed):
        self.s = (seed * 0x9E3779B97F4A7C15 + 1) & 0xFFFFFFFFFFFFFFFF or 1

    def next(self):
        s = self.s
        s ^= s >> 12
        s ^= (s << 25) & 0xFFFFFFFFFFFFFFFF
        s ^= s >> 27
        self.s = s
        return (s * 0x2545F4914F6CDD1D) & 0xFFFFFFFFFFFFFFFF

    def below(self, n):
        return (self.next() >> 11) % n

    def pick(self, items):
        return items[self.below(len(items))]

    def chance(self, percent):
        return self.below(100) < percent


NAMES = ["Anna", "Ben", "Clara", "Dev", "Ella", "Finn", "Greta", "Hugo", "Iris", "Jonas",
         "Kira", "Leo", "Mila", "Nico", "Olga", "Pablo", "Rosa", "Sami", "Tess", "Viktor"]
ANIMALS = [("fox", "foxes"), ("rabbit", "rabbits"), ("owl", "owls"), ("bear", "bears"),
           ("mouse", "mice"), ("goat", "goats"), ("heron", "herons"), ("badger", "badgers"),
           ("otter", "otters"), ("crow", "crows"), ("deer", "deer"), ("frog", "frogs")]
ADJ_CHAR = ["small", "old", "young", "clever", "shy", "brave", "curious", "sleepy", "kind",
            "quiet", "restless", "cheerful", "careful", "stubborn"]
PLACES = ["village by the river", "house at the edge of the forest", "farm on the hill",
          "town near the sea", "cabin in the mountains", "mill by the old bridge",
          "cottage behind the orchard", "house by the harbor"]
FAR_PLACES = ["the top of the hill", "the other side of the lake", "the old lighthouse",
              "the market in the city", "the cave under the cliffs", "the deep part of the forest",
              "the island in the bay", "the ruined tower", "the meadow beyond the fields"]
OBJECTS = [("a red kite", "the kite"), ("a silver key", "the key"), ("a wooden boat", "the boat"),
           ("a map of the stars", "the map"), ("a blue lantern", "the lantern"),
           ("a basket of apples", "the basket"), ("a little bell", "the bell"),
           ("a warm coat", "the coat"), ("a book of songs", "the book"), ("a golden feather", "the feather")]
WEATHER = ["The sun was bright and the air was warm.", "A cold wind blew from the north.",
           "It had rained all night, and the paths were soft and wet.", "Snow lay on the roofs.",
           "The sky was grey, and the clouds hung low.", "It was a clear and quiet morning.",
           "Fog rolled in from the water.", "The leaves were turning yellow and red."]
TIMES = ["One morning", "Early one spring", "On a long summer evening", "One autumn day",
         "In the middle of winter", "Late one night", "On the first day of the year", "One afternoon"]
FEELINGS = ["worried", "sad", "upset", "restless", "unhappy", "lonely"]
PROBLEMS = [("the bridge had fallen into the river", "build a raft from branches"),
            ("a storm came and the path was lost", "follow the sound of the bells"),
            ("a deep ditch blocked the road", "lay a long log across it"),
            ("the night grew dark and the way was hard to see", "light the lantern and walk slowly"),
            ("a gate was locked with a heavy chain", "find another way through the hedge"),
            ("the water was too wide to swim", "wait for the boat of the old fisherman"),
            ("a tall wall stood in the way", "climb the ivy one step at a time")]
HELPERS = ["an old woman with a walking stick", "a farmer on his way home", "a girl with a dog",
           "a wise old owl", "a group of children", "a tired traveler", "a friendly baker"]
MORALS = ["Being kind costs nothing and can change a whole day.",
          "Slow and careful steps still reach the end of the road.",
          "A friend who helps is worth more than gold.",
          "It is brave to ask for help.",
          "Home feels best after a long journey.",
          "Patience opens doors that force cannot.",
          "Sharing makes a small gift large."]
SAYS = ["said", "asked", "whispered", "called", "answered", "laughed"]
COLORS = ["red", "green", "blue", "yellow", "white", "brown", "grey", "orange"]
THINGS = ["trees", "flowers", "stones", "houses", "boats", "birds", "clouds", "hills"]


def cap(s):
    return s[0].upper() + s[1:]


def article(word):
    return "an" if word[0] in "aeiou" else "a"


def hero(rng):
    if rng.chance(50):
        i = rng.below(len(NAMES))
        return NAMES[i], NAMES[i], "she" if i % 2 == 0 else "he"
    adj, (animal, _) = rng.pick(ADJ_CHAR), rng.pick(ANIMALS)
    return f"{article(adj)} {adj} {animal}", f"the {animal}", "it"


def story(rng, number):
    full, short, pron = hero(rng)
    home, far = rng.pick(PLACES), rng.pick(FAR_PLACES)
    obj_full, obj_short = rng.pick(OBJECTS)
    problem, fix = rng.pick(PROBLEMS)
    helper = rng.pick(HELPERS)
    title_obj = obj_short.split()[-1]
    out = [f"Story {number}: {short.title()} and the {cap(title_obj)}", ""]
    p = [f"{rng.pick(TIMES)}, {full} lived in a {home}. {rng.pick(WEATHER)}"]
    if rng.chance(60):
        p.append(f"{cap(short)} felt {rng.pick(FEELINGS)}, because {pron} had lost {obj_full}.")
        want = f"find {obj_short}"
    else:
        p.append(f"{cap(short)} wanted to bring {obj_full} to {far}.")
        want = f"reach {far}"
    if rng.chance(50):
        p.append(f"\"I must {want},\" {short} {rng.pick(SAYS)}.")
    out.append(" ".join(p))
    p = [f"So {short} set out toward {far}."]
    for _ in range(1 + rng.below(3)):
        p.append(f"On the way, {pron} saw {rng.pick(COLORS)} {rng.pick(THINGS)} and "
                 f"{rng.pick(COLORS)} {rng.pick(THINGS)}.")
    p.append(f"But {problem}.")
    out.append(" ".join(p))
    p = [f"Then {helper} came along."]
    if rng.chance(70):
        p.append(f"\"What is wrong?\" {rng.pick(SAYS)} the stranger.")
        p.append(f"{cap(short)} told the whole story.")
    p.append(f"Together they decided to {fix}.")
    p.append(f"It took a long time, but at last they were across.")
    out.append(" ".join(p))
    p = [f"At {far}, {short} {'found ' + obj_short if want.startswith('find') else 'put down ' + obj_short}."]
    p.append(f"{cap(short)} was {rng.pick(['happy', 'proud', 'calm', 'glad'])} and thanked {helper.split(' with ')[0]}.")
    if rng.chance(50):
        p.append(f"When the {rng.pick(['sun set', 'stars came out', 'moon rose', 'rain stopped'])}, "
                 f"{short} went home to the {home}.")
    out.append(" ".join(p))
    out.append(f"Moral: {rng.pick(MORALS)}")
    return "\n".join(out) + "\n\n"


def description(rng, number):
    animal, plural = rng.pick(ANIMALS)
    place = rng.pick(PLACES)
    lines = [f"Note {number}: About {plural.capitalize()}", ""]
    facts = [f"Many {plural} live near the {place.split()[0]}.",
             f"A {animal} likes {rng.pick(['quiet', 'warm', 'dark', 'open', 'wet'])} places.",
             f"In {rng.pick(['spring', 'summer', 'autumn', 'winter'])}, {plural} "
             f"{rng.pick(['sleep a lot', 'look for food', 'build nests', 'travel far', 'stay close to home'])}.",
             f"The {animal} is {rng.pick(ADJ_CHAR)} and {rng.pick(ADJ_CHAR)}.",
             f"You can see {plural} among the {rng.pick(COLORS)} {rng.pick(THINGS)}."]
    order = list(range(len(facts)))
    for i in range(len(order) - 1, 0, -1):
        j = rng.below(i + 1)
        order[i], order[j] = order[j], order[i]
    lines.append(" ".join(facts[i] for i in order[:3 + rng.below(3)]))
    count = 2 + rng.below(8)
    lines.append(f"Count: {count} {plural if count > 1 else animal} were seen on day {1 + rng.below(30)}.")
    return "\n".join(lines) + "\n\n"


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--seed", type=int, default=2025)
    ap.add_argument("--bytes", type=int, default=320_000, help="stop after at least this many bytes")
    ap.add_argument("output", nargs="?", default="examples/data/corpus.txt")
    args = ap.parse_args()
    rng = Rng(args.seed)
    parts, size, stories, notes = [], 0, 0, 0
    while size < args.bytes:
        if rng.chance(80):
            stories += 1
            text = story(rng, stories)
        else:
            notes += 1
            text = description(rng, notes)
        parts.append(text)
        size += len(text)
    with open(args.output, "w", encoding="ascii", newline="\n") as f:
        f.write("".join(parts))
    print(f"wrote {args.output}: {size} bytes, {stories} stories, {notes} notes", file=sys.stderr)


if __name__ == "__main__":
    main()
