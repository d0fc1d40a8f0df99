import Crypto
import Foundation
import FulfillmentService
import JSONRPC
import Testing

/// The content files themselves, on a real directory: ranges, digests, and what is never served.
@Suite struct ContentLibraryTests {
    static func sha256(_ data: Data) -> String { SHA256.hash(data: data).map { String(format: "%02x", $0) }.joined() }

    static func library() throws -> ContentLibrary {
        let dir = FileManager.default.temporaryDirectory.appendingPathComponent("content-\(UUID().uuidString)")
        try FileManager.default.createDirectory(at: dir, withIntermediateDirectories: true)
        return ContentLibrary(directory: dir)
    }

    @Test func aReplacedFileGetsANewDigestAndRangesReadItsBytes() async throws {
        let library = try Self.library()
        let file = library.directory.appendingPathComponent("pack-1.zip")
        let first = Data((0..<10_000).map { UInt8($0 % 251) })
        try first.write(to: file)
        let before = try await library.info("pack-1.zip")
        #expect(before?.size == 10_000 && before?.sha256 == Self.sha256(first))

        let second = Data((0..<12_345).map { UInt8($0 % 13) })
        try second.write(to: file)
        let after = try await library.info("pack-1.zip")
        #expect(after?.size == 12_345 && after?.sha256 == Self.sha256(second))
        let middle = try await library.read("pack-1.zip", offset: 100, length: 50)
        #expect(Data(base64Encoded: middle.data) == second[100..<150])
        #expect(middle.size == 12_345 && middle.sha256 == Self.sha256(second))
        let end = try await library.read("pack-1.zip", offset: 12_345, length: 50)
        #expect(end.data.isEmpty)
        await #expect(throws: RPCError.self) { try await library.read("pack-1.zip", offset: 12_346, length: 1) }
    }

    @Test func missingFilesDirectoriesAndPathsOutsideAreNotContent() async throws {
        let library = try Self.library()
        try Data("secret".utf8).write(to: library.directory.deletingLastPathComponent().appendingPathComponent("outside-\(UUID().uuidString)"))
        try FileManager.default.createDirectory(at: library.directory.appendingPathComponent("folder"), withIntermediateDirectories: true)
        #expect(try await library.info("absent.zip") == nil)
        #expect(try await library.info("folder") == nil)
        #expect(try await library.info("../outside") == nil)
        #expect(try await library.info(".hidden") == nil)
        await #expect(throws: RPCError.self) { try await library.read("absent.zip", offset: 0, length: 1) }
    }
}
