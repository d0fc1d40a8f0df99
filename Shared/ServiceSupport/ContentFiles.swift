import Crypto
import Foundation
import NIOConcurrencyHelpers

#if canImport(Glibc)
    import Glibc
#elseif canImport(Darwin)
    import Darwin
#endif

/// The content directory as fulfillment and the edge both read it: one file per content id, each with
/// its size and SHA-256 (hex), the digest computed once and kept while the file stays the same file: its device,
/// inode, size, modification time and status-change time (which no copy can set back, unlike the modification time
/// `cp -p` or `touch -r` keep). Blocking: call it off the cooperative threads (NIO's thread pool).
public final class ContentFiles: Sendable {
    public let directory: URL
    /// What says a file is still the one a digest was computed of.
    struct Identity: Sendable, Equatable {
        var device: UInt64, inode: UInt64, size: Int64
        var modifiedNs: Int64, changedNs: Int64
    }
    private struct Digest: Sendable { var identity: Identity; var sha256: String }
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
        guard let identity = Self.identity(path) else { return nil }
        let size = identity.size
        if let cached = digests.withLockedValue({ $0[contentId] }), cached.identity == identity {
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
        digests.withLockedValue { $0[contentId] = Digest(identity: identity, sha256: sha) }
        return Installed(path: path, size: size, sha256: sha)
    }

    /// A regular file's identity (`stat`), or nil when there is none at `path`.
    static func identity(_ path: String) -> Identity? {
        var info = stat()
        guard stat(path, &info) == 0, (info.st_mode & S_IFMT) == S_IFREG else { return nil }
        #if canImport(Darwin)
            let (m, c) = (info.st_mtimespec, info.st_ctimespec)
        #else
            let (m, c) = (info.st_mtim, info.st_ctim)
        #endif
        return Identity(
            device: UInt64(info.st_dev), inode: UInt64(info.st_ino), size: Int64(info.st_size),
            modifiedNs: Int64(m.tv_sec) * 1_000_000_000 + Int64(m.tv_nsec), changedNs: Int64(c.tv_sec) * 1_000_000_000 + Int64(c.tv_nsec))
    }
}
