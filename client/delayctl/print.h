// How delayctl prints: tables for people, one JSON object per line for
// programs (-o json), on stdout.
#ifndef DELAYD_CLIENT_DELAYCTL_PRINT_H_
#define DELAYD_CLIENT_DELAYCTL_PRINT_H_

#include <google/protobuf/message.h>
#include <google/protobuf/timestamp.pb.h>

#include <string>
#include <vector>

#include "delayd/v1/delayd.pb.h"

namespace delayctl {

// A message as one line of JSON, with the proto's field names.
std::string Json(const google::protobuf::Message& m);
// A JSON string literal.
std::string JsonString(const std::string& text);
// RFC 3339.
std::string Time(const google::protobuf::Timestamp& t);
// Prints rows, the first being the header, columns padded to fit.
void PrintTable(const std::vector<std::vector<std::string>>& rows);
// A payload as is when it is plain text, else a note of its size.
std::string Shown(const std::string& payload);
std::string ReasonName(delayd::v1::Reason r);
// One event: a line of fields, or JSON; flushed (a pipe sees it at once).
void PrintEvent(bool json, const delayd::v1::Event& e);

}  // namespace delayctl

#endif  // DELAYD_CLIENT_DELAYCTL_PRINT_H_
