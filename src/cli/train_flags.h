/* train_flags.h — `scaletrain train`'s flag parser (train_args.h) as the TrainFlagsParser the
 * engines of src/study take (study/sweep.h), so that sweep and the studies launch runs exactly as
 * `scaletrain train` would without study/ linking cli. */
#ifndef ST_CLI_TRAIN_FLAGS_H
#define ST_CLI_TRAIN_FLAGS_H

#include "study/sweep.h"

/* A pointer to a constant table (no state): parse = train_args_parse, release = train_args_free,
 * option = train_args_option. */
const TrainFlagsParser *cli_train_flags(void);

#endif
