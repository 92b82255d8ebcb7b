// A writing command run as root on another user's store: the files it
// creates (index files, backups, seal copies, segment files) go to the
// store's owner when the command ends, so the owner's job and commands can
// still write them ("Permission denied" on meta/CURRENT otherwise).
#ifndef MLPO_TOOLS_OWNERSHIP_H_
#define MLPO_TOOLS_OWNERSHIP_H_

#include "store/store_options.h"

namespace mlpo {

// Notes the store's directories (each path's store directory and .mlpo,
// the index directory) for GiveFilesToOwners, when this process runs as
// root and the store's first path is another user's. Nothing otherwise.
void WillWrite(const StoreOptions& o);

// Gives every file and directory root created in the noted directories
// to the owner of the store's first path (uid and gid). Called once the
// command is done and its stores are closed; best effort, each failure
// said on stderr.
void GiveFilesToOwners();

}  // namespace mlpo

#endif  // MLPO_TOOLS_OWNERSHIP_H_
