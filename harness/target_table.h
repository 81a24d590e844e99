// The end-of-run table of a campaign: one line per target that ran, its expectation, cases,
// failures, failure rate, max ULP and cases per second. Columns are as wide as their longest
// entry, so long target names (plugin ops, `ns::name/plugin:lib/...`) never run into the next column.
#pragma once

#include "harness/campaign.h"

#include <iosfwd>

namespace detfuzz {

void print_target_table(const CampaignResult &r, std::ostream &os);

}  // namespace detfuzz
