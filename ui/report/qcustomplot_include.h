#pragma once
// Debian's qcustomplot.h spells Qt's keywords (signals, slots, emit, foreach), which Mosaic builds
// without (QT_NO_KEYWORDS, because LibTorch uses `slots` as a name). They are mapped to their
// Q_ macros for this one header only.
#include <QtGlobal>

#define signals Q_SIGNALS
#define slots Q_SLOTS
#define emit Q_EMIT
#define foreach Q_FOREACH
#include <qcustomplot.h>
#undef signals
#undef slots
#undef emit
#undef foreach
