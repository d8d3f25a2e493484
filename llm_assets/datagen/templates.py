"""Sentence templates and article domains in English, and the templates of other languages."""

from __future__ import annotations

import random
from dataclasses import dataclass

from llm_assets.datagen.vocabulary import (
    _ADJECTIVES,
    _ADVERBS,
    _BANDS,
    _COUNTRIES,
    _FIRST_NAMES,
    _MONTHS,
    _NATIONALITIES,
    _NOUNS,
    _NUMBER_WORDS,
    _OCCUPATIONS,
    _ORDINALS,
    _ORGS,
    _PLACES,
    _PUBLICATIONS,
    _STUDIOS,
    _SURNAMES,
    _VERBS_PARTICIPLE,
    _VERBS_PAST,
    _big_numbers,
    _distances,
    _items,
    _measures,
    _plural,
    _with_article,
    _words,
    _year_ranges,
)

_ENGLISH_SLOTS: dict[str, tuple[str, ...]] = {
    "NOUN": _NOUNS,
    "NOUNS": tuple(_plural(n) for n in _NOUNS),
    "A_NOUN": tuple(_with_article(n) for n in _NOUNS),
    "ADJ": _ADJECTIVES,
    "A_ADJ": tuple(_with_article(a) for a in _ADJECTIVES),
    "VPAST": _VERBS_PAST,
    "VPP": _VERBS_PARTICIPLE,
    "ADV": _ADVERBS,
    "OCCUPATION": _OCCUPATIONS,
    "PERSON": tuple(f"{f} {s}" for f in _FIRST_NAMES for s in _SURNAMES),
    "PLACE": _PLACES,
    "COUNTRY": _COUNTRIES,
    "ORG": _ORGS,
    "PUBLICATION": _PUBLICATIONS,
    "MONTH": _MONTHS,
    "DAY": tuple(str(d) for d in range(1, 29)),
    "YEAR": tuple(str(y) for y in range(1750, 2016)),
    "YEAR_RANGE": _year_ranges(),
    "DECADE": tuple(f"{d}s" for d in range(1780, 2011, 10)),
    "CENTURY": tuple(f"{c}th" for c in range(12, 21)),
    "ORDINAL": _ORDINALS,
    "NUMW": _NUMBER_WORDS,
    "NUMW_CAP": tuple(w.capitalize() for w in _NUMBER_WORDS),
    "INT": tuple(str(v) for v in range(3, 400, 3)),
    "BIGNUM": _big_numbers(),
    "PCT": tuple(f"{p / 10:.1f}" for p in range(15, 960, 13)),
    "MEASURE": _measures(),
    "DISTANCE": _distances(),
    "LIFESPAN": tuple(f"{b} – {b + age}" for b in range(1760, 1940, 7) for age in (41, 58, 67, 79)),
    "NATIONALITY": _NATIONALITIES,
    "BAND": _BANDS,
    "STUDIO": _STUDIOS,
}

_ENGLISH_TEMPLATES = _items(
    """{SUBJ} was {VPP} in {YEAR} by {PERSON}.|
    In {MONTH} {YEAR}, {SUBJ_L} was {VPP} near {PLACE}.|
    {SUBJ} {VPAST} {A_ADJ} {NOUN} in {PLACE} during the {CENTURY} century.|
    The {DNOUN} was {ADV} {VPP} by the {ORG} in {YEAR}.|
    According to {PERSON}, the {DNOUN} was one of the most {ADJ} {NOUNS} in {COUNTRY}.|
    By {YEAR}, more than {BIGNUM} {NOUNS} had been {VPP} in {PLACE}.|
    {NAME} received {ADJ} reviews from critics, who {VPAST} its {DNOUN} and its {DNOUN}.|
    The {DNOUN} is {MEASURE} long and was {VPP} in {YEAR}.|
    It was the {ORDINAL} {NOUN} to be {VPP} in {PLACE}, and it remained in use until {YEAR}.|
    {PERSON} later {VPAST} the {DNOUN}, which had been {VPP} {NUMW} years earlier.|
    Although the {NOUN} was {ADJ}, {SUBJ_L} was {ADV} {VPP} by the {ORG}.|
    During the {CENTURY} century, the {NOUN} of {PLACE} became {A_ADJ} {NOUN} for {ADJ} {NOUNS}.|
    The {ADJ} {DNOUN} was {VPP} on {DAY} {MONTH} {YEAR}.|
    {SUBJ} {VPAST} the {DNOUN} after {A_ADJ} {NOUN} with the {ORG}.|
    In {YEAR}, {PERSON} {VPAST} {A_NOUN} at {PLACE}; the {NOUN} was {VPP} {NUMW} years later.|
    There are {NUMW} {NOUNS} in the {DNOUN}, each of which is {ADV} {ADJ}.|
    The {NOUN} has been described as "{A_ADJ} {NOUN} of {ADJ} {NOUNS}" by {PERSON}.|
    {SUBJ} was {VPP} to {PLACE} in {MONTH} {YEAR}, where the {DNOUN} was {VPP}.|
    This {NOUN} was {ADV} {ADJ}, and the {DNOUN} {VPAST} {A_ADJ} {NOUN}.|
    As a result, the {DNOUN} was {VPP} and the {NOUN} was moved to {PLACE}.|
    {PERSON}, {A_ADJ} {OCCUPATION} from {PLACE}, {VPAST} the {DNOUN} in {YEAR}.|
    The {ORG} {VPAST} {BIGNUM} {NOUNS} {YEAR_RANGE}.|
    {SUBJ} is {ADV} regarded as {A_ADJ} example of {ADJ} {NOUN}.|
    The {DNOUN} cost £{BIGNUM}, which was paid by the {ORG}.|
    About {PCT} per cent of the {NOUNS} were {VPP} by {YEAR}.|
    Following the {NOUN} of {YEAR}, {SUBJ_L} was {VPP} by {PERSON} and {PERSON}.|
    The {NOUN} was {VPP}, but the {DNOUN} survived until the {CENTURY} century.|
    It was {VPP} {ADV} after the {NOUN} {VPAST} the {DNOUN}.|
    {NUMW_CAP} {NOUNS} were {VPP} in the {DNOUN} in {YEAR}.|
    The {DNOUN} and the {DNOUN} were {VPP} by the {ORG}, which {VPAST} {A_ADJ} {NOUN} in {PLACE}.|
    {PERSON} wrote that the {DNOUN} was "{ADV} {ADJ}".|
    Most of the {NOUNS} were {VPP} in {PLACE} and {PLACE}.|
    The {NOUN} is now {VPP} by the {ORG}.|
    In the {DECADE}, the {DNOUN} was {VPP} and {VPP}.|
    {SUBJ} {VPAST} {A_NOUN}, {A_NOUN} and {A_NOUN}.|
    The {ORDINAL} {NOUN} was {VPP} on {MONTH} {DAY}, {YEAR}, at a cost of ${BIGNUM}.|
    {SUBJ} {VPAST} {NUMW} {NOUNS} and {NUMW} {NOUNS}.|
    {SUBJ} was {VPP}.|
    The {DNOUN} was {ADV} {VPP}.|
    {SUBJ} was {VPP} by {PERSON} in {YEAR}, and after {A_ADJ} {NOUN} with the {ORG}, it was moved
    to {PLACE}, where the {DNOUN} {VPAST} {A_ADJ} {NOUN} that {VPAST} the {NOUN} for {NUMW} years.|
    {PERSON} ({LIFESPAN}) {VPAST} the {NOUN} in {YEAR}.|
    The {NOUN} was {VPP} in {PLACE}, {COUNTRY}, in {YEAR}.|
    Critics {VPAST} the {DNOUN}, and {PERSON} of {PUBLICATION} called it "{A_ADJ} {NOUN}".|
    {SUBJ} {VPAST} the {ADJ} {DNOUN} of the {ORG}.|
    However, the {DNOUN} was {VPP} in {YEAR} because of {A_ADJ} {NOUN}.|
    The {NOUNS} of the {DNOUN} were {ADV} {VPP}, and several {NOUNS} were {VPP}.|
    Between {YEAR} and the end of the {DECADE}, {SUBJ_L} {VPAST} the {DNOUN} {NUMW} times.|
    The {DNOUN} was {VPP} with {A_ADJ} {NOUN} of {NUMW} {NOUNS}, {A_ADJ} {NOUN} and {A_NOUN}.|
    In an interview with {PUBLICATION}, {PERSON} said that the {DNOUN} was "{ADJ} but {ADJ}".|
    {SUBJ} {VPAST} the {DNOUN} in {PLACE}, {ADV} {VPP} by the {NOUN} of {YEAR}.|
    {SUBJ} was {VPP} in {YEAR} by {PERSON}, {A_ADJ} {OCCUPATION} from {PLACE}, who had {VPP} the
    {DNOUN} of the {ORG} {NUMW} years earlier.|
    After the {NOUN} of {YEAR}, the {ORG} {VPAST} {A_ADJ} {NOUN} near {PLACE}, and by the end of the
    {DECADE} more than {BIGNUM} {NOUNS} had been {VPP} there.|
    The {DNOUN}, which was {VPP} by {PERSON} in {YEAR}, is {MEASURE} long and was {ADV} {VPP}
    during the {CENTURY} century.|
    In {MONTH} {YEAR}, {PERSON} and {PERSON} {VPAST} the {DNOUN}, although the {ORG} had {VPP} the
    {NOUN} and {VPP} its {NOUNS}.|
    Although {PERSON} {VPAST} that the {DNOUN} was "{ADV} {ADJ}", {PUBLICATION} described the {NOUN}
    as {A_ADJ} {NOUN} of {ADJ} {NOUNS}.|
    The {ADJ} {NOUNS} of {PLACE} were {VPP} {YEAR_RANGE}, when the {ORG} {VPAST} the {DNOUN} and
    {VPAST} {A_ADJ} {NOUN} in {COUNTRY}.|
    {SUBJ} {VPAST} {A_ADJ} {NOUN} in {PLACE} on {DAY} {MONTH} {YEAR}, {ADV} after the {DNOUN} had
    been {VPP} by {A_ADJ} {NOUN}.|
    According to {PUBLICATION}, the {DNOUN} was {VPP} at a cost of £{BIGNUM}, of which about {PCT}
    per cent was paid by the {ORG}.|
    During the {DECADE}, {SUBJ_L} {VPAST} the {DNOUN}, the {DNOUN} and the {DNOUN}, and {PERSON}
    {VPAST} {A_NOUN} that {VPAST} {NUMW} {NOUNS}.|
    It is one of the {NUMW} {ADJ} {NOUNS} in {PLACE} that were {VPP} in the {CENTURY} century, and
    the only one to have been {VPP} by the {ORG}.|
    When {PERSON} {VPAST} the {DNOUN} in {YEAR}, the {NOUNS} of {PLACE} and {PLACE} were {ADV}
    {VPP}, and the {ORG} {VPAST} {A_ADJ} {NOUN} to {VPP} them.|
    Contemporary accounts in {PUBLICATION} {VPAST} the {DNOUN} and its {ADJ} {NOUNS}, but modern
    historians such as {PERSON} have {VPP} this view."""
)

_DOMAIN_INTROS = {
    "person": "{NAME} ({LIFESPAN}) was {NATIONALITY} {OCCUPATION} who {VPAST} {A_ADJ} {NOUN} in "
    "{PLACE}.",
    "ship": "{NAME} was {A_ADJ} {SHIP_TYPE} built for the {NAVY} in the {DECADE}.",
    "storm": "{NAME} was {A_ADJ} tropical cyclone that {VPAST} {PLACE} in {MONTH} {YEAR}.",
    "music": '"{NAME}" is a song by {BAND}, released in {YEAR} as the {ORDINAL} single from their '
    "{ORDINAL} album.",
    "film": "{NAME} is a {YEAR} {FILM_GENRE} film directed by {PERSON} and starring {PERSON} and "
    "{PERSON}.",
    "game": "{NAME} is {A_GAME_GENRE} video game developed by {STUDIO} and published in {YEAR} for "
    "the {CONSOLE}.",
    "battle": "The {NAME} was fought on {DAY} {MONTH} {YEAR} between the forces of {COUNTRY} and "
    "{COUNTRY}.",
    "building": "{NAME} is {A_BUILDING_TYPE} in {PLACE}, {COUNTRY}.",
    "species": "{NAME} is a species of {TAXON} in the family {FAMILY}.",
    "road": "{NAME} is a state trunkline highway in the U.S. state of {US_STATE} that runs for "
    "{DISTANCE}.",
}
_INTRO_SLOTS: dict[str, tuple[str, ...]] = {
    "SHIP_TYPE": _items("battleship|cruiser|destroyer|frigate|ocean liner|sloop|submarine"),
    "NAVY": _items("Royal Navy|United States Navy|Imperial German Navy|French Navy|Italian Navy"),
    "FILM_GENRE": _items("drama|comedy|thriller|western|horror|science fiction|musical|war"),
    "A_GAME_GENRE": _items(
        "a role-playing|an action-adventure|a platform|a tactical|a racing|a puzzle|a strategy"
    ),
    "CONSOLE": _items("PlayStation Portable|Nintendo DS|Xbox 360|PlayStation 3|Wii|Game Boy"),
    "A_BUILDING_TYPE": _items(
        """a church|a country house|a castle|a cathedral|a museum|a town hall|a railway station|
        a lighthouse|a Grade II listed building"""
    ),
    "TAXON": _items("fungus|bird|moth|beetle|flowering plant|frog|snail|fish"),
    "FAMILY": _items(
        "Amanitaceae|Corvidae|Fagaceae|Salicaceae|Ranidae|Noctuidae|Carabidae|Helicidae|Conidae"
    ),
    "US_STATE": _items("Michigan|Ohio|Washington|California|New York|Texas|Indiana|Maryland"),
}


@dataclass(frozen=True)
class _Domain:
    """One kind of article: how its titles look, what it is called, its nouns and sections."""

    name: str
    subjects: tuple[str, ...]
    nouns: tuple[str, ...]
    sections: tuple[str, ...]


_DOMAINS: tuple[_Domain, ...] = (
    _Domain(
        "person",
        _items("He|He|He|She|The young man|The author"),
        _items(
            """career|father|mother|wife|son|daughter|education|appointment|retirement|estate|
            correspondence|friendship|reputation|portrait"""
        ),
        _items(
            """Early life|Education|Career|Political career|Military service|Personal life|
            Later life|Death|Legacy|Honours"""
        ),
    ),
    _Domain(
        "ship",
        _items("The ship|She|The vessel|The cruiser"),
        _items(
            "hull|deck|turret|boiler|armour|crew|propeller|torpedo|gun|mast|dockyard|convoy|refit"
        ),
        _items(
            """Design and description|Armament|Propulsion|Construction and career|Service history|
            World War I|World War II|Fate"""
        ),
    ),
    _Domain(
        "storm",
        _items("The storm|The hurricane|The cyclone|The system|The depression"),
        _items(
            """rainfall|wind|landfall|storm surge|flooding|pressure|eye|convection|warning|
            evacuation|damage|coastline"""
        ),
        _items("Meteorological history|Preparations|Impact|Aftermath|Retirement"),
    ),
    _Domain(
        "music",
        _items("The song|The single|The track|It"),
        _items(
            """chorus|lyrics|melody|guitar|vocals|producer|music video|chart|bridge|recording|
            tempo|verse"""
        ),
        _items(
            """Background|Recording|Composition|Release|Critical reception|Chart performance|
            Music video|Live performances|Track listing|Personnel"""
        ),
    ),
    _Domain(
        "film",
        _items("The film|It|The picture"),
        _items(
            """screenplay|cast|cinematography|soundtrack|box office|premiere|director|scene|
            script|sequel|budget"""
        ),
        _items("Plot|Cast|Production|Filming|Release|Reception|Box office|Legacy"),
    ),
    _Domain(
        "game",
        _items("The game|It"),
        _items(
            """gameplay|level|character|console|developer|publisher|soundtrack|multiplayer mode|
            sequel|engine|battle system"""
        ),
        _items("Gameplay|Plot|Development|Music|Release|Reception|Legacy"),
    ),
    _Domain(
        "battle",
        _items("The battle|The attack|The campaign|The engagement"),
        _items(
            """infantry|cavalry|artillery|casualties|trenches|flank|garrison|reinforcements|
            supply line|ceasefire|prisoners|offensive"""
        ),
        _items("Background|Prelude|Opposing forces|Battle|Aftermath|Casualties|Legacy"),
    ),
    _Domain(
        "building",
        _items("The building|The church|The structure|The castle|It"),
        _items(
            """nave|tower|spire|chancel|facade|roof|window|courtyard|garden|architect|
            foundation stone|restoration"""
        ),
        _items("History|Architecture|Interior|Exterior|Restoration|Present day"),
    ),
    _Domain(
        "species",
        _items("The species|It|This species|The organism"),
        _items(
            """habitat|cap|stem|wing|plumage|diet|range|population|breeding season|predators|
            spores|leaves"""
        ),
        _items(
            """Taxonomy|Description|Distribution and habitat|Ecology|Behaviour|Conservation|
            Toxicity"""
        ),
    ),
    _Domain(
        "road",
        _items("The highway|The road|The route|The freeway|It"),
        _items(
            """interchange|junction|lane|bridge|traffic|pavement|bypass|intersection|median|
            right-of-way|overpass|county line"""
        ),
        _items("Route description|History|Major intersections|Future|Traffic"),
    ),
)
_SUBSECTIONS = _items(
    """Early years|Later years|Reception|Construction|Operations|Modern era|Commercial performance|
    Critical response|First phase|Second phase|Description|Changes|Notes"""
)
_SHIP_NAMES = _items(
    """Valiant|Dreadnought|Indomitable|Resolution|Orion|Ajax|Bellerophon|Vanguard|Audacious|
    Formidable|Renown|Repulse|Endeavour|Intrepid|Triumph|Warspite|Nassau|Seydlitz|Emden"""
)
_SONG_WORDS = _items(
    """Love|Heart|Night|Summer|Fire|Rain|Dream|Home|Road|Light|Blue|Golden|Wild|Lonely|Electric|
    Broken|Midnight|River|Sky|Paradise|Story|Girl|Ocean|Silver"""
)
_GAME_WORDS = _items("Chronicles|Legends|Tales|Quest|Saga|Kingdom|Shadow|Dragon|Star|Crystal")
_GENERA = _items(
    "Amanita|Corvus|Quercus|Salix|Rana|Cortinarius|Lactarius|Boletus|Aquila|Falco|Helix|Conus"
)
_EPITHETS = _items(
    """alba|nigra|rubra|major|minor|vulgaris|montana|borealis|orientalis|australis|sylvatica|
    maritima|gigantea|elegans|muscaria"""
)


def _article_title(domain: str, rnd: random.Random) -> tuple[str, str]:
    """(title, name): the heading of a new article and how its prose refers to it."""
    choice, place, year = rnd.choice, rnd.choice(_PLACES), rnd.randint(1850, 2012)
    if domain == "person":
        title = f"{choice(_FIRST_NAMES)} {choice(_SURNAMES)}"
        return title, title
    if domain == "ship":
        prefix = choice(("HMS", "HMS", "USS", "SMS"))
        title = f"{prefix} {choice(_SHIP_NAMES) if prefix != 'USS' else place}"
        return title, title
    if domain == "storm":
        name = f"{choice(('Hurricane', 'Tropical Storm', 'Typhoon'))} {choice(_FIRST_NAMES)}"
        return f"{name} ({year})", name
    if domain == "music":
        name = f"{choice(_SONG_WORDS)} {choice(_SONG_WORDS)}"
        return f"{name} ({choice(('song', 'song', 'album'))})", name
    if domain == "film":
        name = f"The {choice(_ADJECTIVES[:40]).capitalize()} {choice(_NOUNS).capitalize()}"
        return f"{name} ({year} film)", name
    if domain == "game":
        name = f"{choice(_SONG_WORDS)} {choice(_GAME_WORDS)}{choice(('', ' II', ' III', ' IV'))}"
        return name, name
    if domain == "battle":
        title = f"{choice(('Battle', 'Battle', 'Siege'))} of {place}"
        return title, title
    if domain == "building":
        title = choice(
            (
                f"{place} Cathedral",
                f"{place} Castle",
                f"{choice(_SURNAMES)} Hall",
                f"St {choice(_FIRST_NAMES)}'s Church, {place}",
            )
        )
        return title, title
    if domain == "species":
        title = f"{choice(_GENERA)} {choice(_EPITHETS)}"
        return title, title
    number = rnd.randint(1, 200)
    if rnd.random() < 0.5:
        return f"M-{number} (Michigan highway)", f"M-{number}"
    return f"State Route {number} ({choice(_INTRO_SLOTS['US_STATE'])})", f"State Route {number}"


# --- other languages ------------------------------------------------------------------------------
_FOREIGN_SLOTS: dict[str, dict[str, tuple[str, ...]]] = {
    # German: only feminine and neuter nouns, whose nominative and accusative articles agree.
    "de": {
        "NOUN": _items(
            """die Stadt|das Dorf|die Kirche|das Schloss|die Brücke|das Museum|die Burg|die Schule|
            das Rathaus|die Universität|die Bibliothek|das Theater|die Festung|die Mühle|
            die Straße|die Bahnstrecke|das Kloster|die Kapelle|das Gebäude|die Regierung|
            die Armee|die Gemeinde|die Region|das Gebiet|die Insel|das Tal|die Sammlung|
            das Album|die Band|das Lied|die Zeitung|die Partei|die Schlacht|das Schiff|die Firma|
            das Unternehmen|die Ausstellung|die Bevölkerung|das Werk"""
        ),
        "ADJ": _words(
            """bekannt berühmt wichtig groß klein alt neu modern historisch beliebt bedeutend
            umstritten erfolgreich schön typisch selten einzigartig politisch"""
        ),
        "VPP": _words(
            """gebaut gegründet zerstört erweitert renoviert eröffnet geschlossen verkauft
            beschrieben veröffentlicht errichtet gestaltet gekauft übernommen restauriert benannt
            entdeckt angegriffen verlegt gefeiert"""
        ),
        "VPAST": _words(
            """baute gründete zerstörte erweiterte kaufte verkaufte beschrieb veröffentlichte
            leitete besuchte eroberte entdeckte gewann verlor übernahm"""
        ),
        "ADV": _items("sehr|besonders|ziemlich|vor allem|bis heute|weithin"),
        "NUMW": _items("zwei|drei|vier|fünf|sechs|sieben|acht|zehn|zwölf"),
    },
    # French and Spanish: verbs in tenses that do not agree with their object, invariable
    # adjectives, and no article after "de"/"à" (which would need du/au/del/al).
    "fr": {
        "NOUN": _items(
            """la ville|le village|l'église|le château|le pont|le musée|la cathédrale|l'école|
            la bibliothèque|le théâtre|la forteresse|le moulin|la rue|la gare|le monastère|
            la chapelle|le bâtiment|le gouvernement|l'armée|la commune|la région|l'île|la vallée|
            la collection|l'album|le groupe|la chanson|le journal|le parti|la bataille|le navire|
            l'entreprise|l'exposition|la population|l'œuvre"""
        ),
        "ADJ": _words(
            """célèbre moderne historique populaire remarquable rare unique politique magnifique
            riche pittoresque emblématique typique considérable"""
        ),
        "VPAST": _items(
            """a construit|a fondé|a détruit|a agrandi|a acheté|a vendu|a décrit|a publié|a dirigé|
            a visité|a restauré|a découvert|a rénové|a conçu|a ouvert|a modernisé"""
        ),
        "ADV": _items("très|particulièrement|assez|toujours|encore|vraiment"),
        "NUMW": _items("deux|trois|quatre|cinq|six|sept|huit|dix|douze"),
    },
    "es": {
        "NOUN": _items(
            """la ciudad|el pueblo|la iglesia|el castillo|el puente|el museo|la catedral|
            la escuela|la biblioteca|el teatro|la fortaleza|el molino|la calle|la estación|
            el monasterio|la capilla|el edificio|el gobierno|el ejército|el municipio|la región|
            la isla|el valle|la colección|el álbum|el grupo|la canción|el periódico|el partido|
            la batalla|el barco|la empresa|la exposición|la población|la obra"""
        ),
        "ADJ": _words(
            """importante popular notable célebre enorme excelente interesante principal
            impresionante relevante singular fundamental original regional cultural"""
        ),
        "VPAST": _items(
            """construyó|fundó|destruyó|amplió|compró|vendió|describió|publicó|dirigió|visitó|
            restauró|descubrió|diseñó|inauguró|renovó|modernizó"""
        ),
        "ADV": _items("muy|especialmente|bastante|todavía|realmente|sin duda"),
        "NUMW": _items("dos|tres|cuatro|cinco|seis|siete|ocho|diez|doce"),
    },
}
_FOREIGN_TEMPLATES: dict[str, tuple[str, ...]] = {
    "de": _items(
        """{de.NP} wurde im Jahr {YEAR} von {PERSON} {de.VPP}.|
        Im Jahr {YEAR} {de.VPAST} {PERSON} {de.NOUN} in der Nähe von {PLACE}.|
        {de.NP} ist heute {de.ADV} {de.ADJ} und gehört zu den ältesten Bauwerken der Region.|
        Nach dem Krieg wurde {de.NOUN} {de.VPP} und später an {PERSON} verkauft.|
        Die Stadt {PLACE} hatte im Jahr {YEAR} etwa {BIGNUM} Einwohner.|
        Laut {PERSON} war {de.NOUN} damals sehr {de.ADJ}.|
        Zwischen {de.YEARS} wurde {de.NOUN} mehrmals {de.VPP}.|
        {de.NP} liegt in der Nähe von {PLACE} und ist {de.ADV} {de.ADJ}.|
        Seit {YEAR} ist {de.NOUN} für Besucher geöffnet.|
        Es gibt {de.NUMW} bekannte Beispiele dieser Art in {PLACE}.|
        Im Jahr {YEAR} {de.VPAST} {PERSON} {de.NOUN}, die bis heute {de.ADJ} ist.|
        Die Geschichte von {PLACE} ist eng mit {PERSON} verbunden, der dort {de.NUMW} Jahre
        lebte."""
    ),
    "fr": _items(
        """En {YEAR}, {PERSON} {fr.VPAST} {fr.NOUN} près de {PLACE}.|
        {fr.NP} est {fr.ADV} {fr.ADJ} et attire de nombreux visiteurs chaque année.|
        Selon {PERSON}, {fr.NOUN} était très {fr.ADJ} à cette époque.|
        La ville de {PLACE} comptait environ {BIGNUM} habitants en {YEAR}.|
        Entre {fr.YEARS}, {PERSON} {fr.VPAST} {fr.NOUN} à plusieurs reprises.|
        {fr.NP} se trouve au centre de {PLACE} et reste {fr.ADV} {fr.ADJ}.|
        Après la guerre, {PERSON} {fr.VPAST} {fr.NOUN} avec le soutien de {PERSON}.|
        Aujourd'hui, {fr.NOUN} reste un lieu {fr.ADJ} de la région.|
        Il existe {fr.NUMW} exemples connus de ce type à {PLACE}.|
        Depuis {YEAR}, {fr.NOUN} est un symbole {fr.ADJ} pour les habitants de {PLACE}.|
        Au cours du siècle suivant, {PERSON} {fr.VPAST} {fr.NOUN}, qui est {fr.ADV} {fr.ADJ}."""
    ),
    "es": _items(
        """En {YEAR}, {PERSON} {es.VPAST} {es.NOUN} cerca de {PLACE}.|
        {es.NP} es {es.ADV} {es.ADJ} y recibe muchos visitantes cada año.|
        Según {PERSON}, {es.NOUN} era muy {es.ADJ} en aquella época.|
        La ciudad de {PLACE} tenía unos {BIGNUM} habitantes en {YEAR}.|
        Entre {es.YEARS}, {PERSON} {es.VPAST} {es.NOUN} varias veces.|
        {es.NP} se encuentra en el centro de {PLACE} y sigue siendo {es.ADV} {es.ADJ}.|
        Después de la guerra, {PERSON} {es.VPAST} {es.NOUN} con el apoyo de {PERSON}.|
        Hoy en día, {es.NOUN} sigue siendo un lugar {es.ADJ} de la región.|
        Existen {es.NUMW} ejemplos conocidos de este tipo en {PLACE}.|
        Desde {YEAR}, {es.NOUN} es un símbolo {es.ADJ} para los habitantes de {PLACE}.|
        Durante el siglo siguiente, {PERSON} {es.VPAST} {es.NOUN}, que es {es.ADV} {es.ADJ}."""
    ),
}
for _code, _and in (("de", "und"), ("fr", "et"), ("es", "y")):
    # sentence-initial noun phrases, and ordered year pairs ("1845 und 1862")
    _FOREIGN_SLOTS[_code]["NP"] = tuple(n[0].upper() + n[1:] for n in _FOREIGN_SLOTS[_code]["NOUN"])
    _FOREIGN_SLOTS[_code]["YEARS"] = tuple(
        r.removeprefix("between ").replace(" and ", f" {_and} ") for r in _year_ranges()
    )

_EDIT_WORDS = _NOUNS + _ADJECTIVES[:60]
"""Replacement words of near-duplicate edits."""
