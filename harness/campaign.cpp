#include "harness/diff.h"
