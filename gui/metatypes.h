#pragma once
// Storage types that cross threads or appear in signals, declared to Qt's meta-type system once,
// before any class uses them.
#include <QMetaType>
#include <vector>

#include "storage/db/run_store.h"

Q_DECLARE_METATYPE(fragscope::storage::RunId)
Q_DECLARE_METATYPE(std::vector<fragscope::storage::RunId>)
