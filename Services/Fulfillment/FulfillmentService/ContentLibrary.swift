import Crypto
import Foundation
import IAPProtocol
import JSONRPC
import NIOConcurrencyHelpers
import NIOPosix

/// Downloadable content: one file per catalog content id in `<data-dir>/content/`. Reads are ranged so
/// a client can resume an interrupted download; each answer carries the file's size and SHA-256 so
/// the client can check what it assembled. File reads and hashing (a whole file, the first time it
/// is asked for) run on NIO's shared blocking-I/O thread pool, never on the cooperative threads that
/// answer every other request.
public final class ContentLibrary: Sendable {
    public let directory: URL
    private struct Digest: Sendable { var size: Int64; var modified: Date; var sha256: String }
    private let digests = NIOLockedValueBox<[String: Digest]>([:])

    public init(directory: URL) {
        self.directory = directory
    }

    /// Content ids are file names: letters, digits, `.`, `_`, `-`, not starting with a dot.
    public static func isValidId(_ id: String) -> Bool {
        guard (1...128).contains(id.utf8.count), let first = id.utf8.first, first != UInt8(ascii: ".") else { return false }
        return id.utf8.allSatisfy { c in
            (c >= 0x30 && c <= 0x39) || (c >= 0x41 && c <= 0x5A) || (c >= 0x61 && c <= 0x7A)
                || c == UInt8(ascii: ".") || c == UInt8(ascii: "_") || c == UInt8(ascii: "-")
        }
    }

    /// Size and SHA-256 (hex) of a content file; nil when it is not installed. The digest is cached
    /// until the file's size or modification time changes.
    public func info(_ contentId: String) async throws(RPCError) -> Installed? {
        try await Self.offload { () throws(RPCError) in try self.infoNow(contentId) }
    }

    /// Up to `length` bytes from `offset`; an offset equal to the size reads nothing (the end).
    public func read(_ contentId: String, offset: Int64, length: Int) async throws(RPCError) -> FulfillmentReadContent.Result {
        try await Self.offload { () throws(RPCError) in try self.readNow(contentId, offset: offset, length: length) }
    }

    /// An installed content file: its size and SHA-256 (hex).
    public struct Installed: Sendable, Equatable {
        public var size: Int64
        public var sha256: String
    }

    /// Runs blocking file work on the shared I/O pool and hands back its answer or its RPCError.
    private static func offload<T: Sendable>(_ work: @escaping @Sendable () throws(RPCError) -> T) async throws(RPCError) -> T {
        let outcome: Result<T, RPCError>
        do {
            outcome = try await NIOThreadPool.singleton.runIfActive {
                Result<T, any Error> { try work() }.mapError { $0 as? RPCError ?? .internalError("reading content failed") }
            }
        } catch {
            throw RPCError.internalError("the content reader is not running")
        }
        return try outcome.get()
    }

    private func infoNow(_ contentId: String) throws(RPCError) -> Installed? {
        guard Self.isValidId(contentId) else { return nil }
        let path = directory.appendingPathComponent(contentId).path
        guard let attributes = try? FileManager.default.attributesOfItem(atPath: path),
            (attributes[.type] as? FileAttributeType) == .typeRegular,
            let size = (attributes[.size] as? NSNumber)?.int64Value,
            let modified = attributes[.modificationDate] as? Date
        else { return nil }
        if let cached = digests.withLockedValue({ $0[contentId] }), cached.size == size, cached.modified == modified {
            return Installed(size: size, sha256: cached.sha256)
        }
        guard let handle = FileHandle(forReadingAtPath: path) else { return nil }
        defer { try? handle.close() }
        var hasher = SHA256()
        do {
            while let chunk = try handle.read(upToCount: 1 << 20), !chunk.isEmpty { hasher.update(data: chunk) }
        } catch {
            throw RPCError.internalError("reading content \(contentId) failed")
        }
        let sha = hasher.finalize().map { String(format: "%02x", $0) }.joined()
        digests.withLockedValue { $0[contentId] = Digest(size: size, modified: modified, sha256: sha) }
        return Installed(size: size, sha256: sha)
    }

    private func readNow(_ contentId: String, offset: Int64, length: Int) throws(RPCError) -> FulfillmentReadContent.Result {
        guard let installed = try infoNow(contentId) else {
            throw RPCError.notFound("content \(contentId) is not installed on this server", reason: "contentMissing")
        }
        let size = installed.size
        guard offset <= size else {
            throw RPCError.invalidParams("offset \(offset) is past the end (size \(size))", field: "offset", reason: "outOfRange")
        }
        guard let handle = FileHandle(forReadingAtPath: directory.appendingPathComponent(contentId).path) else {
            throw RPCError.notFound("content \(contentId) is not installed on this server", reason: "contentMissing")
        }
        defer { try? handle.close() }
        let bytes: Data
        do {
            try handle.seek(toOffset: UInt64(offset))
            bytes = try handle.read(upToCount: Int(min(Int64(length), size - offset))) ?? Data()
        } catch {
            throw RPCError.internalError("reading content \(contentId) failed")
        }
        return .init(data: bytes.base64EncodedString(), offset: offset, size: size, sha256: installed.sha256)
    }
}
