import Crypto
import Foundation
import NIOConcurrencyHelpers

/// The content directory as fulfillment and the edge both read it: one file per content id, each with
/// its size and SHA-256 (hex), the digest computed once and kept until the file's size or modification
/// time changes. Blocking: call it off the cooperative threads (NIO's thread pool).
public final class ContentFiles: Sendable {
    public let directory: URL
    private struct Digest: Sendable { var size: Int64; var modified: Date; var sha256: String }
    private let digests = NIOLockedValueBox<[String: Digest]>([:])

    public init(directory: URL) {
        self.directory = directory
    }

    /// An installed content file: its path, size and SHA-256 (hex).
    public struct Installed: Sendable, Equatable {
        public var path: String
        public var size: Int64
        public var sha256: String
    }

    public enum Failure: Error { case unreadable(String) }

    /// Content ids are file names: letters, digits, `.`, `_`, `-`, not starting with a dot.
    public static func isValidId(_ id: String) -> Bool {
        guard (1...128).contains(id.utf8.count), let first = id.utf8.first, first != UInt8(ascii: ".") else { return false }
        return id.utf8.allSatisfy { c in
            (c >= 0x30 && c <= 0x39) || (c >= 0x41 && c <= 0x5A) || (c >= 0x61 && c <= 0x7A)
                || c == UInt8(ascii: ".") || c == UInt8(ascii: "_") || c == UInt8(ascii: "-")
        }
    }

    /// The file of `contentId`; nil when the id is not valid or no regular file is installed under it.
    public func installed(_ contentId: String) throws -> Installed? {
        guard Self.isValidId(contentId) else { return nil }
        let path = directory.appendingPathComponent(contentId).path
        guard let attributes = try? FileManager.default.attributesOfItem(atPath: path),
            (attributes[.type] as? FileAttributeType) == .typeRegular,
            let size = (attributes[.size] as? NSNumber)?.int64Value,
            let modified = attributes[.modificationDate] as? Date
        else { return nil }
        if let cached = digests.withLockedValue({ $0[contentId] }), cached.size == size, cached.modified == modified {
            return Installed(path: path, size: size, sha256: cached.sha256)
        }
        guard let handle = FileHandle(forReadingAtPath: path) else { return nil }
        defer { try? handle.close() }
        var hasher = SHA256()
        do {
            while let chunk = try handle.read(upToCount: 1 << 20), !chunk.isEmpty { hasher.update(data: chunk) }
        } catch {
            throw Failure.unreadable(contentId)
        }
        let sha = hasher.finalize().map { String(format: "%02x", $0) }.joined()
        digests.withLockedValue { $0[contentId] = Digest(size: size, modified: modified, sha256: sha) }
        return Installed(path: path, size: size, sha256: sha)
    }
}
