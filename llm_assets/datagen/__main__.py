"""``python -m llm_assets.datagen``."""

import sys

from llm_assets.datagen.cli import main

sys.exit(main())
