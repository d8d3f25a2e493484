"""Amazon-review-like rows (:func:`generate_reviews`)."""

from __future__ import annotations

import random
from collections.abc import Iterator
from typing import Any

from llm_assets.datagen.vocabulary import _items

_PRODUCTS = _items(
    """blender|kettle|phone case|backpack|desk lamp|coffee grinder|pair of headphones|keyboard|
    water bottle|vacuum cleaner|toaster|phone charger|umbrella|frying pan|tent|bike light|
    electric toothbrush|office chair|rice cooker|travel mug|yoga mat|smart watch|board game|
    hair dryer|bluetooth speaker|set of kitchen knives|winter jacket|pair of running shoes"""
)
_FEATURES = _items(
    """battery|handle|lid|cable|sound quality|build quality|zipper|switch|screen|fabric|motor|
    design|manual|packaging|strap|power button|finish|size|weight|colour"""
)
_POSITIVE = _items("excellent|sturdy|comfortable|reliable|well made|beautiful|solid|great|perfect")
_NEGATIVE = _items("flimsy|cheap|noisy|uncomfortable|awkward|disappointing|poorly made|useless")
_DURATIONS = _items(
    "two days|a week|ten days|two weeks|a month|six weeks|three months|half a year|a year"
)
_PEOPLE = _items("wife|husband|son|daughter|mother|father|partner|friend|brother|sister|roommate")
_REVIEW_SENTENCES: dict[str, tuple[str, ...]] = {
    "positive": _items(
        """I bought this {product} for my {person} and we both love it.|
        The {feature} is {pos} and the {feature2} works exactly as described.|
        Great value for the money.|
        After {duration} of daily use it still works like new.|
        Highly recommended!|
        Shipping was fast and the {product} arrived well packaged.|
        Much better than the {product} I had before.|
        Easy to set up, even for someone like me who is not good with gadgets.|
        I would definitely buy it again.|
        The {feature} feels {pos} and looks even better than in the pictures.|
        My {person} was so impressed that they ordered one too.|
        Five stars, no complaints at all."""
    ),
    "neutral": _items(
        """It does what it says, nothing more.|
        The {feature} is fine but the {feature2} could be better.|
        Average quality for the price.|
        It took {duration} to arrive, which was longer than promised.|
        Some parts feel {neg}, others are {pos}.|
        Not bad, but I expected a bit more from this brand.|
        The {feature} is smaller than I thought it would be.|
        It works, although the {feature} is a little {neg}."""
    ),
    "negative": _items(
        """The {product} stopped working after {duration}.|
        The {feature} is {neg} and feels cheap.|
        Customer service never answered my emails.|
        Not worth the money.|
        It arrived damaged and the {feature} was missing.|
        I returned it after {duration}.|
        The description was misleading.|
        Very disappointed with this purchase.|
        The {feature} broke the first time I used it.|
        Save your money and buy something else."""
    ),
}
_REVIEW_TITLES: dict[str, tuple[str, ...]] = {
    "positive": _items(
        """Great product|Love it!|Works perfectly|Excellent value|Five stars|Exactly as described|
        Better than expected|Very happy|Perfect gift|Does the job well"""
    ),
    "neutral": _items("It's okay|Decent for the price|Not bad|Average|Does the job|Mixed feelings"),
    "negative": _items(
        "Broke after a week|Do not buy|Waste of money|Disappointed|Poor quality|Returned it"
    ),
}
_RATING_WEIGHTS = (0.10, 0.06, 0.09, 0.20, 0.55)
"""Share of 1..5 stars, as in public product-review data (mostly five, a bump at one)."""
_STARS = (1, 2, 3, 4, 5)
_RATING_MIX = {
    1: ("negative",) * 5,
    2: ("negative", "negative", "negative", "neutral"),
    3: ("neutral", "neutral", "positive", "negative"),
    4: ("positive", "positive", "positive", "neutral"),
    5: ("positive",),
}
_ID_ALPHABET = "ABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789"


def sentiment_of(rating: int) -> str:
    """The sentiment label of a star rating: 1-2 negative, 3 neutral, 4-5 positive."""
    return "negative" if rating <= 2 else "neutral" if rating == 3 else "positive"


def generate_reviews(n: int, seed: int = 0) -> Iterator[dict[str, Any]]:
    """Yield ``n`` Amazon-review-like rows ``{"review_id", "rating", "title", "text"}``.

    Ratings 1-5 are skewed towards five stars; the title and sentences agree with the rating
    (see :func:`sentiment_of`). A few reviews are one short sentence, some run to ten.
    """
    if n < 0:
        raise ValueError(f"n must be >= 0, got {n}")
    rnd = random.Random(f"reviews:{seed}")
    for _ in range(n):
        rating = rnd.choices(_STARS, weights=_RATING_WEIGHTS)[0]
        mood = sentiment_of(rating)
        n_sentences = min(10, max(1, int(rnd.expovariate(1 / 3.2)) + 1))
        product = rnd.choice(_PRODUCTS)
        features = rnd.sample(_FEATURES, 2)
        sentences = []
        for _ in range(n_sentences):
            tone = rnd.choice(_RATING_MIX[rating])
            sentences.append(
                rnd.choice(_REVIEW_SENTENCES[tone]).format(
                    product=product,
                    person=rnd.choice(_PEOPLE),
                    feature=features[0],
                    feature2=features[1],
                    pos=rnd.choice(_POSITIVE),
                    neg=rnd.choice(_NEGATIVE),
                    duration=rnd.choice(_DURATIONS),
                )
            )
        text = " ".join(dict.fromkeys(sentences))  # no sentence twice in one review
        yield {
            "review_id": "R" + "".join(rnd.choices(_ID_ALPHABET, k=13)),
            "rating": rating,
            "title": rnd.choice(_REVIEW_TITLES[mood]),
            "text": text[0].upper() + text[1:],
        }
