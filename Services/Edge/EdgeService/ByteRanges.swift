import Foundation

/// What a `GET` of a content file answers, from its `Range` and `If-Range` headers (RFC 9110 section 14):
/// single byte ranges only. A `Range` this server does not take (another unit, several ranges, a malformed
/// one) is ignored and the whole file is sent, as the RFC allows; `If-Range` with another entity tag sends
/// the whole file too, so a client resuming a file that changed starts over instead of splicing two.
enum ByteRanges: Equatable {
    case full
    case partial(ClosedRange<Int64>)
    case unsatisfiable

    static func resolve(range: String?, ifRange: String?, etag: String, size: Int64) -> ByteRanges {
        guard let range else { return .full }
        if let ifRange, ifRange.trimmingCharacters(in: .whitespaces) != etag { return .full }
        let spec = range.trimmingCharacters(in: .whitespaces)
        guard spec.lowercased().hasPrefix("bytes="), !spec.contains(",") else { return .full }
        let body = spec.dropFirst(6).trimmingCharacters(in: .whitespaces)
        guard let dash = body.firstIndex(of: "-") else { return .full }
        let first = body[..<dash].trimmingCharacters(in: .whitespaces)
        let last = body[body.index(after: dash)...].trimmingCharacters(in: .whitespaces)
        if first.isEmpty {
            // A suffix: the last n bytes.
            guard let n = Int64(last), n >= 0 else { return .full }
            guard n > 0, size > 0 else { return .unsatisfiable }
            return .partial(max(0, size - n)...(size - 1))
        }
        guard let start = Int64(first), start >= 0 else { return .full }
        var end = size - 1
        if !last.isEmpty {
            guard let given = Int64(last), given >= start else { return .full }
            end = min(given, size - 1)
        }
        guard start < size else { return .unsatisfiable }
        return .partial(start...end)
    }
}
