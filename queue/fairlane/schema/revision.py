"""The name under which landed revisions import ``fairlane.schema.revision_helpers``.

Landed revisions are never edited (migrations/revisions.sha256), so this name stays as long as
they do, without a warning: nothing a user writes imports it.
"""

from fairlane.schema.revision_helpers import (
    drop_functions as drop_functions,
)
from fairlane.schema.revision_helpers import (
    drop_trigger as drop_trigger,
)
from fairlane.schema.revision_helpers import (
    execute as execute,
)
from fairlane.schema.revision_helpers import (
    schema as schema,
)
